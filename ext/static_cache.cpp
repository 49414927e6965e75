#include "bindings.h"

#include "upstream_format.h"

#include <memory>
#include <optional>
#include <string>

namespace lookup_ext {
namespace {

const char* storage_name(lookup::StaticCache::Storage storage) {
    using Storage = lookup::StaticCache::Storage;
    switch (storage) {
        case Storage::memory: return "memory";
        case Storage::stored_copy: return "stored copy";
        case Storage::new_copy: return "new copy";
        case Storage::borrowed: return "borrowed";
        case Storage::none: break;
    }
    return "none";
}

}  // namespace

void bind_static_cache(py::module_& m) {
    py::class_<PyStaticCache>(m, "StaticCache")
        .def_static(
            "open",
            [](const std::string& path, std::optional<int64_t> n_vocab, std::optional<uint64_t> fingerprint,
               std::optional<std::string> store) {
                auto c = std::make_unique<PyStaticCache>();
                c->path = path;
                std::optional<uint32_t> vocab;
                if (n_vocab) vocab = checked_vocab(*n_vocab);
                std::string error;
                bool ok;
                {
                    py::gil_scoped_release nogil;
                    ok = store ? c->cache->open(path, vocab, fingerprint, *store, &error)
                               : c->cache->open(path, vocab, fingerprint, &error);
                }
                if (!ok) throw CacheError(path, error);
                c->verified.store(c->cache->verified());  // the store's copies are verified already
                return c;
            },
            py::arg("path"), py::arg("n_vocab") = py::none(), py::arg("fingerprint") = py::none(),
            py::kw_only(), py::arg("store") = py::none())
        .def("verify",
             [](PyStaticCache& c) {
                 std::string error;
                 bool ok;
                 {
                     py::gil_scoped_release nogil;
                     std::shared_lock l(c.mutex);
                     if (!c.cache) {
                         ok = false;
                         error = "static cache is closed";
                     } else {
                         ok = c.verified.load() || c.cache->verify(&error);
                     }
                 }
                 if (!ok) throw CacheError(c.path, error);
                 c.verified.store(true);
             })
        .def("close",
             [](PyStaticCache& c) {
                 py::gil_scoped_release nogil;
                 std::unique_lock l(c.mutex);
                 c.cache.reset();
                 c.verified.store(false);
             })
        .def("changed_on_disk",
             [](const PyStaticCache& c) {
                 std::shared_lock l(c.mutex);
                 return c.open_cache().changed_on_disk();
             })
        .def_property_readonly("verified", [](const PyStaticCache& c) { return c.verified.load(); })
        .def_property_readonly("storage",
                               [](const PyStaticCache& c) {
                                   std::shared_lock l(c.mutex);
                                   return storage_name(c.open_cache().storage());
                               })
        .def_property_readonly("path", [](const PyStaticCache& c) { return c.path; })
        .def_property_readonly("header",
                               [](const PyStaticCache& c) {
                                   std::shared_lock l(c.mutex);
                                   return header_dict(c.open_cache().header());
                               })
        .def(
            "followers",
            [](const PyStaticCache& c, int64_t t0, int64_t t1) {
                std::shared_lock l(c.mutex);
                const lookup::StaticCache& cache = c.open_cache();
                const int64_t n_vocab = cache.header().n_vocab;
                lookup::FollowerSpan span;
                if (t0 >= 0 && t0 < n_vocab && t1 >= 0 && t1 < n_vocab) {
                    span = cache.find(static_cast<token_t>(t0), static_cast<token_t>(t1)).followers;
                }
                if (span.size == 0) return followers_copy({});
                // A read-only view into the copy, which the view keeps alive past close().
                auto* owner = new std::shared_ptr<lookup::StaticCache>(c.cache);
                py::capsule base(owner, [](void* p) { delete static_cast<std::shared_ptr<lookup::StaticCache>*>(p); });
                py::array_t<token_t> view({static_cast<py::ssize_t>(span.size), py::ssize_t{2}},
                                          {py::ssize_t{sizeof(lookup::Follower)}, py::ssize_t{sizeof(token_t)}},
                                          reinterpret_cast<const token_t*>(span.data), base);
                view.attr("setflags")(py::arg("write") = false);
                return view;
            },
            py::arg("t0"), py::arg("t1"))
        .def("to_arrays",
             [](const PyStaticCache& c) {
                 std::shared_lock l(c.mutex);
                 const lookup::StaticCache& cache = c.verified_cache();
                 CacheArrays arrays;
                 cache.for_each([&](token_t t0, token_t t1, const lookup::FollowerSpan& s) {
                     const token_t pair[2] = {t0, t1};
                     arrays.add(lookup::make_key(pair, 2), s);
                 });
                 return arrays.to_numpy();
             })
        .def(
            "save_upstream",
            [](const PyStaticCache& c, const std::string& path) {
                std::string error;
                bool ok;
                {
                    std::shared_lock l(c.mutex);
                    const lookup::StaticCache& cache = c.verified_cache();
                    py::gil_scoped_release nogil;
                    ok = lookup::save_upstream(path, cache, &error);
                }
                if (!ok) raise_os_error(path, error);
            },
            py::arg("path"))
        .def("__repr__", [](const PyStaticCache& c) {
            std::shared_lock l(c.mutex);
            if (!c.cache) return "StaticCache(" + c.path + ", closed)";
            return "StaticCache(" + c.path + ", keys=" + std::to_string(c.cache->header().n_keys) + ")";
        });
}

}  // namespace lookup_ext
