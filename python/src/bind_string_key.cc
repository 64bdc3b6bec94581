// recemb/string_key.h: the key of one string id, and the keys of a numpy array of them (object
// arrays of str / bytes, fixed-width U or S arrays) in one call.
#include <Python.h>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "recemb/error.h"
#include "recemb/string_key.h"

#include "bind.h"

namespace recemb::python {
namespace {

// The UTF-8 bytes of `code_points` (a numpy U element, trailing NULs already removed) appended
// to `out`; InvalidArgument for a surrogate or a value beyond U+10FFFF, which
// have no UTF-8 form (as str.encode("utf-8") refuses them).
void append_utf8(std::u32string_view code_points, std::string& out) {
  for (const char32_t c : code_points) {
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      if (c >= 0xD800 && c <= 0xDFFF) {
        throw InvalidArgument("the surrogate code point " + std::to_string(c) +
                              " has no UTF-8 form");
      }
      out += static_cast<char>(0xE0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x110000) {
      out += static_cast<char>(0xF0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else {
      throw InvalidArgument("the code point " + std::to_string(c) + " is beyond U+10FFFF");
    }
  }
}

// The key of a str (its UTF-8 bytes) or bytes object; InvalidArgument starting with `what` for
// any other object or a str without UTF-8 form.
int64_t object_key(const py::handle item, const std::string& what) {
  if (PyBytes_Check(item.ptr())) {
    return string_key(std::string_view(PyBytes_AS_STRING(item.ptr()),
                                       static_cast<size_t>(PyBytes_GET_SIZE(item.ptr()))));
  }
  if (PyUnicode_Check(item.ptr())) {
    Py_ssize_t size = 0;
    const char* utf8 = PyUnicode_AsUTF8AndSize(item.ptr(), &size);
    if (utf8 == nullptr) {
      PyErr_Clear();
      throw InvalidArgument(what + ": a str without UTF-8 form (a lone surrogate)");
    }
    return string_key(std::string_view(utf8, static_cast<size_t>(size)));
  }
  throw InvalidArgument(what + ": a " +
                        std::string(py::str(py::type::handle_of(item).attr("__name__"))) +
                        ", not a str or bytes");
}

// The keys of the string ids of `ids`, an array of dtype object, U or S (any shape and layout), as
// an int64 array of its shape. A U or S element is read as numpy reads it: without its trailing
// NULs.
py::array_t<int64_t> string_keys(const py::array& ids) {
  const char kind = ids.dtype().kind();
  if (kind != 'O' && kind != 'U' && kind != 'S') {
    throw InvalidArgument("string ids must be an array of dtype object, U or S, got " +
                          std::string(py::str(ids.dtype())));
  }
  // A C-contiguous copy when needed (the element loop below walks memory in order).
  const auto contiguous = py::array::ensure(ids, py::array::c_style);
  py::array_t<int64_t> keys(std::vector<ssize_t>(ids.shape(), ids.shape() + ids.ndim()));
  int64_t* out = keys.mutable_data();
  const ssize_t size = contiguous.size();
  const auto* data = static_cast<const char*>(contiguous.data());
  // The dtype's own itemsize attribute: pybind11 before 2.12 reads it from numpy 1's descriptor
  // layout, which numpy 2 changed (docs/python.md, "torch 2.x and TorchRec from PyPI").
  const auto itemsize = contiguous.dtype().attr("itemsize").cast<size_t>();
  if (kind == 'O') {
    const auto* items = reinterpret_cast<PyObject* const*>(data);
    for (ssize_t i = 0; i < size; ++i) {
      out[i] = object_key(py::handle(items[i]), "the id at flat index " + std::to_string(i));
    }
    return keys;
  }
  std::u32string code_points;
  std::string utf8;
  for (ssize_t i = 0; i < size; ++i) {
    const char* element = data + static_cast<size_t>(i) * itemsize;
    if (kind == 'S') {
      size_t length = itemsize;
      while (length > 0 && element[length - 1] == '\0') --length;
      out[i] = string_key(std::string_view(element, length));
      continue;
    }
    code_points.resize(itemsize / sizeof(char32_t));
    std::memcpy(code_points.data(), element, itemsize);  // the element may be unaligned
    while (!code_points.empty() && code_points.back() == U'\0') code_points.pop_back();
    utf8.clear();
    try {
      append_utf8(code_points, utf8);
    } catch (const InvalidArgument& error) {
      throw InvalidArgument("the str at flat index " + std::to_string(i) + ": " + error.what());
    }
    out[i] = string_key(utf8);
  }
  return keys;
}

}  // namespace

void bind_string_key(py::module_& module) {
  module.def(
      "string_key", [](const py::handle id) { return object_key(id, "string_key"); }, py::arg("id"),
      "The int64 key of a str (its UTF-8 bytes) or bytes id: XXH3-64, seed 0, two's complement.");
  module.def("string_keys", &string_keys, py::arg("ids"),
             "string_key of every element of an array of dtype object (str or bytes), U or S: an "
             "int64 array of its shape.");
}

}  // namespace recemb::python
