// Shared by the binding files of the extension module recemb._recemb: one bind_<header>(module)
// per public header (module.cc calls them in dependency order), the std::span conversions, and a
// helper that binds a config aggregate field by field.
//
// Spans and numpy arrays (the only conversion with a policy of its own):
//   - Python -> std::span<T> (T an arithmetic type, possibly const): the argument must be a numpy
//     array of exactly T's dtype, C-contiguous and aligned (and writeable unless T is const); the
//     span then covers all of its elements, whatever its shape. Nothing is ever converted or
//     copied: any other argument is rejected (TypeError), so a span always views the caller's
//     memory. The Python package (python/recemb) does any dtype or layout conversion explicitly.
//   - Python -> std::span<const T> (T a bound class, a variant, another span, ...): a sequence;
//     the converted elements live for the duration of the call.
//   - std::span<T> -> Python: a 1-D numpy array over the same memory, read-only when T is const.
//     Its base is the parent object for reference_internal (a field of a view object, a variable
//     of an Embedding), so the memory outlives the array; otherwise (a callback argument) the array
//     is valid only during the call.
#ifndef RECEMB_PYTHON_BIND_H_
#define RECEMB_PYTHON_BIND_H_

#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace pybind11::detail {

template <typename T>
struct type_caster<std::span<T>> {
  using Element = std::remove_const_t<T>;
  static constexpr bool kNumeric = std::is_arithmetic_v<Element>;
  static_assert(kNumeric || std::is_const_v<T>, "only spans of numbers may be writable");

  PYBIND11_TYPE_CASTER(std::span<T>, const_name("numpy.ndarray"));

  bool load(handle source, bool convert) {
    if constexpr (kNumeric) {
      (void)convert;
      if (!array_t<Element, array::c_style>::check_(source)) return false;
      auto array = reinterpret_borrow<pybind11::array>(source);
      constexpr int kAligned = npy_api::NPY_ARRAY_ALIGNED_;
      if ((array_proxy(array.ptr())->flags & kAligned) == 0) return false;
      if constexpr (std::is_const_v<T>) {
        value = std::span<T>(static_cast<T*>(array.data()), static_cast<size_t>(array.size()));
      } else {
        if (!array.writeable()) return false;
        value =
            std::span<T>(static_cast<T*>(array.mutable_data()), static_cast<size_t>(array.size()));
      }
      return true;
    } else {
      if (!isinstance<sequence>(source) || isinstance<str>(source)) return false;
      const auto items = reinterpret_borrow<sequence>(source);
      storage_.clear();
      storage_.reserve(items.size());
      for (const handle item : items) {
        make_caster<Element> element;
        if (!element.load(item, convert)) return false;
        storage_.push_back(cast_op<Element&&>(std::move(element)));
      }
      value = std::span<T>(storage_);
      return true;
    }
  }

  static handle cast(std::span<T> source, return_value_policy /*policy*/, handle parent) {
    static_assert(kNumeric, "only spans of numbers convert to Python");
    // A capsule that owns nothing stands in for a base when there is no parent: with no base at
    // all, pybind11 would copy the memory.
    static int no_owner = 0;
    const object base =
        parent ? reinterpret_borrow<object>(parent) : capsule(&no_owner, [](void*) {});
    array_t<Element> array({static_cast<ssize_t>(source.size())}, {ssize_t{sizeof(Element)}},
                           source.data(), base);
    if constexpr (std::is_const_v<T>) {
      array_proxy(array.ptr())->flags &= ~npy_api::NPY_ARRAY_WRITEABLE_;
    }
    return array.release();
  }

 private:
  std::vector<Element> storage_;
};

}  // namespace pybind11::detail

namespace recemb::python {

namespace py = pybind11;

// A field of a config aggregate T: its Python name and its member pointer.
template <typename T, typename Value>
struct Field {
  const char* name;
  Value T::*member;
};

// Binds T's constructor taking every listed field (keyword or positional, in the order given)
// with the default of a value-initialized T, a read-write attribute per field, the class
// attribute _fields, the fields' names in that order (as a namedtuple's), and pickling (hence
// copy.deepcopy) as the tuple of the fields' values. The defaults thus come from the C++
// declaration and are never restated here or in the Python package.
template <typename T, typename... Values>
void bind_fields(py::class_<T>& cls, Field<T, Values>... fields) {
  cls.attr("_fields") = py::make_tuple(fields.name...);
  const T defaults{};
  cls.def(py::init([fields...](Values... values) {
            T result{};
            ((result.*(fields.member) = std::move(values)), ...);
            return result;
          }),
          (py::arg(fields.name) = defaults.*(fields.member))...);
  (cls.def_readwrite(fields.name, fields.member), ...);
  cls.def(py::pickle(
      [fields...](const T& value) { return py::make_tuple(value.*(fields.member)...); },
      [fields...](const py::tuple& state) {
        if (state.size() != sizeof...(Values)) {
          throw py::value_error("a pickled state of " + std::to_string(sizeof...(Values)) +
                                " fields was expected");
        }
        T result{};
        size_t index = 0;
        ((result.*(fields.member) = state[index++].template cast<Values>()), ...);
        return result;
      }));
}

// A 1-D numpy array owning `values` (moved into it: no copy).
template <typename T>
py::array_t<T> owning_array(std::vector<T>&& values) {
  auto* owned = new std::vector<T>(std::move(values));
  const py::capsule owner(owned,
                          [](void* pointer) { delete static_cast<std::vector<T>*>(pointer); });
  return py::array_t<T>({static_cast<ssize_t>(owned->size())}, {ssize_t{sizeof(T)}}, owned->data(),
                        owner);
}

// A dynamic table's contents as Python receives them (moved, not copied): (keys int64 [n],
// parameters float32 [n * dim], [(slot name, float32 [n * width])]).
template <typename Contents>
py::tuple contents_tuple(Contents&& contents) {
  py::list slots;
  for (auto& [name, values] : contents.slots) {
    slots.append(py::make_tuple(name, owning_array(std::move(values))));
  }
  return py::make_tuple(owning_array(std::move(contents.keys)),
                        owning_array(std::move(contents.parameters)), slots);
}

void bind_error(py::module_& module);
void bind_combiner(py::module_& module);
void bind_initializer(py::module_& module);
void bind_learning_rate(py::module_& module);
void bind_optimizer(py::module_& module);
void bind_config(py::module_& module);
void bind_placement(py::module_& module);
void bind_communicator(py::module_& module);
void bind_batch(py::module_& module);
void bind_executor(py::module_& module);
void bind_embedding(py::module_& module);
void bind_checkpoint(py::module_& module);
void bind_serving(py::module_& module);
void bind_string_key(py::module_& module);
// Not a header's: the plain-C functions of graph_op_abi.h (graph_ops.cc).
void bind_graph_ops(py::module_& module);

}  // namespace recemb::python

#endif  // RECEMB_PYTHON_BIND_H_
