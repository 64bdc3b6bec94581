// The int64 key of a string id, for dynamic tables (config.h, DynamicVocabulary), whose keys are
// any int64: string ids (user names, URLs, raw categorical values) become keys by one fixed hash,
// the same on every machine, rank, run and language binding (docs/python.md, "Dynamic
// vocabularies").
#ifndef RECEMB_STRING_KEY_H_
#define RECEMB_STRING_KEY_H_

#include <cstdint>
#include <string_view>

#include "recemb/export.h"

namespace recemb {

// XXH3-64 (xxHash, seed 0) of the bytes of `id`, read as a signed int64 (two's complement): the
// key of "" is 0x2D06800538D394C2. Python's str ids are hashed as their UTF-8 bytes.
RECEMB_EXPORT int64_t string_key(std::string_view id);

}  // namespace recemb

#endif  // RECEMB_STRING_KEY_H_
