#include "bindings.h"

#include "folder_table_builder.h"
#include "page_release.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace lookup_ext {
namespace {

py::dict folder_header_dict(const lookup::FolderTableHeader& h) {
    py::dict d;
    d["format_version"] = h.format_version;
    d["bucket_bits"] = h.bucket_bits;
    d["n_vocab"] = h.n_vocab;
    d["min_count"] = h.min_count;
    d["fingerprint"] = h.fingerprint;
    d["n_keys"] = h.n_keys;
    d["file_size"] = h.file_size;
    return d;
}

}  // namespace

void bind_folder_table(py::module_& m) {
    py::class_<PyFolderTable>(m, "FolderTable")
        .def_static(
            "open",
            [](const std::string& path, int64_t n_vocab, uint64_t fingerprint) {
                auto t = std::make_unique<PyFolderTable>();
                t->path = path;
                const uint32_t vocab = checked_vocab(n_vocab);
                std::string error;
                bool ok;
                {
                    py::gil_scoped_release nogil;
                    ok = t->table->open(path, vocab, fingerprint, &error);
                }
                if (!ok) throw CacheError(path, error);
                return t;
            },
            py::arg("path"), py::arg("n_vocab"), py::arg("fingerprint"))
        .def("verify",
             [](const PyFolderTable& t) {
                 std::string error;
                 bool ok;
                 {
                     py::gil_scoped_release nogil;
                     ok = t.table->verify(&error);
                 }
                 if (!ok) throw CacheError(t.path, error);
             })
        .def_property_readonly("path", [](const PyFolderTable& t) { return t.path; })
        .def_property_readonly("header", [](const PyFolderTable& t) { return folder_header_dict(t.table->header()); })
        .def(
            "followers",
            [](const PyFolderTable& t, const std::vector<int64_t>& key) {
                const auto k = checked_key(key, t.table->header().n_vocab);
                std::vector<lookup::Follower> scratch;
                return followers_copy(k ? t.table->find(*k, scratch) : lookup::FollowerSpan{});
            },
            py::arg("key"));

    py::class_<PyWorkspaceView>(m, "WorkspaceView")
        .def(py::init([](const py::object& added, const py::object& removed, const py::object& table) {
                 auto v = std::make_unique<PyWorkspaceView>();
                 v->added_object = added;
                 v->removed_object = removed;
                 v->table_object = table;
                 v->added = &added.cast<PyNgramCache&>();
                 v->n_vocab = v->added->n_vocab;
                 if (!removed.is_none()) v->removed = &removed.cast<PyNgramCache&>();
                 if (!table.is_none()) v->table = &table.cast<PyFolderTable&>();
                 if ((v->removed != nullptr && v->removed->n_vocab != v->n_vocab) ||
                     (v->table != nullptr && v->table->table->header().n_vocab != v->n_vocab)) {
                     throw py::value_error("the workspace layers have different vocabulary sizes");
                 }
                 return v;
             }),
             py::arg("added"), py::arg("removed") = py::none(), py::arg("table") = py::none())
        .def_property_readonly("table", [](const PyWorkspaceView& v) { return v.table_object; })
        .def(
            "followers",
            [](const PyWorkspaceView& v, const std::vector<int64_t>& key) {
                const auto k = checked_key(key, v.n_vocab);
                const LockedSources locked(nullptr, WorkspaceArg{v.added, v.removed, v.table, v.n_vocab}, nullptr);
                return followers_copy(k ? locked.sources.workspace.find(*k) : lookup::FollowerSpan{});
            },
            py::arg("key"));

    m.def(
        "build_folder_table",
        [](const std::vector<py::object>& documents, const std::string& path, int64_t n_vocab, uint64_t fingerprint,
           int64_t memory_limit, int64_t min_count, bool release_pages, int64_t threads) {
            const uint32_t vocab = checked_vocab(n_vocab);
            if (memory_limit <= 0 || min_count < 1 || min_count > 0xFFFFFFFF) {
                throw py::value_error("memory_limit must be > 0 and min_count >= 1");
            }
            if (threads < 1 || threads > 256) throw py::value_error("threads must be 1..256");
            std::vector<TokenArray> arrays;
            std::vector<lookup::TokenView> views;
            arrays.reserve(documents.size());
            {
                lookup::PageRelease pages(release_pages);  // the check reads every page once too
                for (const py::object& d : documents) {
                    arrays.push_back(as_tokens(d));
                    const size_t size = static_cast<size_t>(arrays.back().size());
                    check_tokens(arrays.back().data(), size, vocab);
                    views.push_back({arrays.back().data(), size});
                    pages.done_with(views.back().data, size * sizeof(lookup::token_t));
                }
            }
            const lookup::FolderTableOptions options{vocab, fingerprint, static_cast<uint32_t>(min_count),
                                                     static_cast<size_t>(memory_limit), release_pages,
                                                     static_cast<unsigned>(threads)};
            lookup::FolderTableBuild stats;
            std::string error;
            bool ok;
            {
                py::gil_scoped_release nogil;
                ok = lookup::build_folder_table(views, options, path, &stats, &error);
            }
            if (!ok) raise_os_error(path, error);
            py::dict d;
            d["n_tokens"] = stats.n_tokens;
            d["n_keys"] = stats.n_keys;
            d["n_keys_seen"] = stats.n_keys_seen;
            d["units"] = stats.units;
            d["passes"] = stats.passes;
            d["file_size"] = stats.file_size;
            d["peak_bytes"] = stats.peak_bytes;
            return d;
        },
        py::arg("documents"), py::arg("path"), py::arg("n_vocab"), py::arg("fingerprint"), py::kw_only(),
        py::arg("memory_limit"), py::arg("min_count") = 2, py::arg("release_pages") = false, py::arg("threads") = 1);
}

}  // namespace lookup_ext
