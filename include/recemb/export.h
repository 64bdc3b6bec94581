// RECEMB_EXPORT marks the symbols of the public API; everything else is hidden.
#ifndef RECEMB_EXPORT_H_
#define RECEMB_EXPORT_H_

#if defined(RECEMB_STATIC_DEFINE)
#define RECEMB_EXPORT
#elif defined(RECEMB_BUILDING_LIBRARY)
#define RECEMB_EXPORT __attribute__((visibility("default")))
#else
#define RECEMB_EXPORT
#endif

#endif  // RECEMB_EXPORT_H_
