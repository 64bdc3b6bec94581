// recemb/checkpoint.h. Paths convert from str or os.PathLike and to pathlib.Path. Every function
// releases the interpreter lock (they read or write whole tables). The numpy arrays of
// SaveOptions.extra_arrays are borrowed: each NamedArray keeps its array alive, and SaveOptions
// keeps its NamedArrays alive. RestoredState.extra_arrays returns float32 arrays over the state's
// own vectors (their base is the RestoredState).
// Failing system calls raise OSError subclasses (bind_error.cc).
#include <map>
#include <pybind11/stl/filesystem.h>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "recemb/checkpoint.h"

#include "bind.h"

namespace recemb::python {
void bind_checkpoint(py::module_& module) {
  using Release = py::call_guard<py::gil_scoped_release>;

  py::class_<NamedArray>(module, "NamedArray",
                         "Caller state saved with a checkpoint: a name and a float32 array "
                         "(C-contiguous, borrowed until save_checkpoint returns).")
      .def(py::init([](std::string name, std::span<const float> values) {
             return NamedArray{.name = std::move(name), .values = values};
           }),
           py::arg("name"), py::arg("values"), py::keep_alive<1, 3>())
      .def_readonly("name", &NamedArray::name)
      .def_readonly("values", &NamedArray::values);

  // Not bind_fields: extra_arrays must keep the NamedArrays (and so their arrays) alive.
  const SaveOptions defaults{};
  py::class_<SaveOptions>(module, "SaveOptions")
      .def(py::init([](int keep_last, std::vector<NamedArray> extra_arrays,
                       std::map<std::string, std::string> metadata, int64_t checksum_block_bytes) {
             return SaveOptions{.keep_last = keep_last,
                                .extra_arrays = std::move(extra_arrays),
                                .metadata = std::move(metadata),
                                .checksum_block_bytes = checksum_block_bytes};
           }),
           py::arg("keep_last") = defaults.keep_last,
           py::arg("extra_arrays") = defaults.extra_arrays, py::arg("metadata") = defaults.metadata,
           py::arg("checksum_block_bytes") = defaults.checksum_block_bytes, py::keep_alive<1, 3>())
      .def_readwrite("keep_last", &SaveOptions::keep_last)
      .def_property(
          "extra_arrays", [](const SaveOptions& options) { return options.extra_arrays; },
          py::cpp_function(
              [](SaveOptions& options, std::vector<NamedArray> extra_arrays) {
                options.extra_arrays = std::move(extra_arrays);
              },
              py::keep_alive<1, 2>()))
      .def_readwrite("metadata", &SaveOptions::metadata)
      .def_readwrite("checksum_block_bytes", &SaveOptions::checksum_block_bytes);

  module.def("save_checkpoint", &save_checkpoint, py::arg("embedding"), py::arg("root"),
             py::arg("options") = SaveOptions{}, Release(),
             "Saves `embedding` atomically as root/ckpt-<step, 12 digits> and deletes the "
             "checkpoints beyond options.keep_last; returns the new checkpoint's path.");
  module.def("latest_checkpoint", &latest_checkpoint, py::arg("root"), Release(),
             "The complete checkpoint under `root` with the largest step, or None.");

  py::enum_<VocabularyResize>(module, "VocabularyResize",
                              "What restore_checkpoint does when a table's vocabulary_size "
                              "differs from the checkpoint's.")
      .value("kError", VocabularyResize::kError)
      .value("kGrow", VocabularyResize::kGrow)
      .value("kGrowOrShrink", VocabularyResize::kGrowOrShrink);
  module.def("vocabulary_resize_name", &vocabulary_resize_name, py::arg("resize"),
             "'error', 'grow' or 'grow_or_shrink'.");
  module.def("parse_vocabulary_resize", &parse_vocabulary_resize, py::arg("name"),
             "The inverse of vocabulary_resize_name; anything else raises InvalidArgument "
             "listing the valid names.");

  py::class_<RestoreOptions> restore_options(module, "RestoreOptions");
  bind_fields(restore_options, Field{"resize", &RestoreOptions::resize},
              Field{"convert_dtype", &RestoreOptions::convert_dtype});

  py::class_<RestoredState>(module, "RestoredState")
      .def_readonly("step", &RestoredState::step)
      .def_property_readonly(
          "extra_arrays",
          [](py::object self) {
            py::dict result;
            for (auto& [name, values] : self.cast<RestoredState&>().extra_arrays) {
              result[py::str(name)] =
                  py::array_t<float>({static_cast<py::ssize_t>(values.size())},
                                     {py::ssize_t{sizeof(float)}}, values.data(), self);
            }
            return result;
          })
      .def_readonly("metadata", &RestoredState::metadata);

  module.def("restore_checkpoint", &restore_checkpoint, py::arg("embedding"), py::arg("checkpoint"),
             py::arg("options") = RestoreOptions{}, Release(),
             "Restores the checkpoint (a ckpt-* directory, or a root: its latest) into "
             "`embedding` after verifying every file; on error the embedding is unchanged.");

  py::class_<LoadOptions> load_options(module, "LoadOptions");
  bind_fields(load_options, Field{"tables_only", &LoadOptions::tables_only},
              Field{"num_threads", &LoadOptions::num_threads});
  module.def("load_checkpoint", &load_checkpoint, py::arg("checkpoint"),
             py::arg("options") = LoadOptions{}, Release(),
             "A new Embedding built from the checkpoint's own configs, restored.");

  py::class_<CheckpointFile>(module, "CheckpointFile")
      .def_readonly("path", &CheckpointFile::path)
      .def_readonly("bytes", &CheckpointFile::bytes)
      .def_readonly("checksum", &CheckpointFile::checksum)
      .def_readonly("ok", &CheckpointFile::ok)
      .def_readonly("error", &CheckpointFile::error);

  py::class_<CheckpointInfo>(module, "CheckpointInfo")
      .def_readonly("format_version", &CheckpointInfo::format_version)
      .def_readonly("step", &CheckpointInfo::step)
      .def_readonly("manifest_json", &CheckpointInfo::manifest_json)
      .def_readonly("files", &CheckpointInfo::files)
      .def_readonly("ok", &CheckpointInfo::ok);

  py::class_<InspectOptions> inspect_options(module, "InspectOptions");
  bind_fields(inspect_options, Field{"verify", &InspectOptions::verify});
  module.def("inspect_checkpoint", &inspect_checkpoint, py::arg("checkpoint"),
             py::arg("options") = InspectOptions{}, Release(),
             "Describes a checkpoint; damaged data files are reported in the result (ok, "
             "files[i].error), not raised.");
  module.def(
      "read_static_table_as_dynamic",
      [](const std::filesystem::path& checkpoint, std::string_view table) {
        DynamicTableContents contents;
        {
          py::gil_scoped_release release;
          contents = read_static_table_as_dynamic(checkpoint, table);
        }
        return contents_tuple(std::move(contents));
      },
      py::arg("checkpoint"), py::arg("table"),
      "A static table of a checkpoint as a dynamic table's contents, flat arrays as "
      "Embedding.read_dynamic_table gives them: row r becomes key r.");
}

}  // namespace recemb::python
