#include "bindings.h"

#include "upstream_format.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace lookup_ext {
namespace {

bool caches_equal(const lookup::NgramCache& a, const lookup::NgramCache& b) {
    if (a.n_keys() != b.n_keys() || a.n_followers() != b.n_followers() || a.total_count() != b.total_count()) {
        return false;
    }
    bool equal = true;
    a.for_each([&](lookup::NgramKey key, const lookup::FollowerSpan& fa) {
        if (!equal) return;
        const std::vector<lookup::Follower> x = lookup::sorted_followers(fa);
        const std::vector<lookup::Follower> y = lookup::sorted_followers(b.find(key));
        equal = std::equal(x.begin(), x.end(), y.begin(), y.end(), [](const auto& p, const auto& q) {
            return p.token == q.token && p.count == q.count;
        });
    });
    return equal;
}

// Checks the arguments of add/remove, then runs the update without the GIL, under the
// cache's write lock.
template <class Update>
auto update_cache(PyNgramCache& c, const py::object& token_ids, int64_t first, Update&& update) {
    if (first < 0) throw py::value_error("first must be >= 0");
    const TokenArray tokens = as_tokens(token_ids);
    const size_t n = static_cast<size_t>(tokens.size());
    check_tokens(tokens.data(), n, c.n_vocab);
    py::gil_scoped_release nogil;
    std::unique_lock l(c.mutex);
    return update(tokens.data(), n, static_cast<size_t>(first));
}

}  // namespace

void bind_ngram_cache(py::module_& m) {
    py::class_<PyNgramCache>(m, "NgramCache")
        .def(py::init<int64_t>(), py::arg("n_vocab"))
        .def_property_readonly("n_vocab", [](const PyNgramCache& c) { return c.n_vocab; })
        .def_property_readonly("n_keys", [](const PyNgramCache& c) { std::shared_lock l(c.mutex); return c.cache.n_keys(); })
        .def_property_readonly("n_followers", [](const PyNgramCache& c) { std::shared_lock l(c.mutex); return c.cache.n_followers(); })
        .def_property_readonly("total_count", [](const PyNgramCache& c) { std::shared_lock l(c.mutex); return c.cache.total_count(); })
        .def_property_readonly("memory_bytes", [](const PyNgramCache& c) { std::shared_lock l(c.mutex); return c.cache.memory_bytes(); })
        .def(
            "add",
            [](PyNgramCache& c, const py::object& token_ids, int64_t first) {
                update_cache(c, token_ids, first, [&](const token_t* t, size_t n, size_t f) { c.cache.add(t, n, f); });
            },
            py::arg("tokens"), py::arg("first") = 0)
        .def(
            "remove",
            [](PyNgramCache& c, const py::object& token_ids, int64_t first) {
                return update_cache(c, token_ids, first,
                                    [&](const token_t* t, size_t n, size_t f) { return c.cache.remove(t, n, f); });
            },
            py::arg("tokens"), py::arg("first") = 0)
        .def(
            "merge",
            [](PyNgramCache& c, PyNgramCache& other) {
                if (other.n_vocab != c.n_vocab) throw py::value_error("caches of different vocabulary sizes");
                py::gil_scoped_release nogil;
                if (&other == &c) {
                    std::unique_lock l(c.mutex);
                    c.cache.merge(c.cache);
                    return;
                }
                std::unique_lock l(c.mutex, std::defer_lock);
                std::shared_lock lo(other.mutex, std::defer_lock);
                std::lock(l, lo);
                c.cache.merge(other.cache);
            },
            py::arg("other"))
        .def("clear", [](PyNgramCache& c) { std::unique_lock l(c.mutex); c.cache.clear(); })
        .def(
            "followers",
            [](const PyNgramCache& c, std::vector<int64_t> key) {
                const auto k = checked_key(key, c.n_vocab);
                if (!k) return followers_copy({});
                std::shared_lock l(c.mutex);
                return followers_copy(c.cache.find(*k));
            },
            py::arg("key"))
        .def("to_arrays",
             [](const PyNgramCache& c) {
                 std::shared_lock l(c.mutex);
                 CacheArrays arrays;
                 c.cache.for_each([&](lookup::NgramKey k, const lookup::FollowerSpan& s) { arrays.add(k, s); });
                 return arrays.to_numpy();
             })
        .def(
            "save_upstream",
            [](const PyNgramCache& c, const std::string& path) {
                std::string error;
                bool ok;
                {
                    py::gil_scoped_release nogil;
                    std::shared_lock l(c.mutex);
                    ok = lookup::save_upstream(path, c.cache, &error);
                }
                if (!ok) raise_os_error(path, error);
            },
            py::arg("path"))
        .def_static(
            "load_upstream",
            [](const std::string& path, int64_t n_vocab) {
                auto c = std::make_unique<PyNgramCache>(n_vocab);
                std::string error;
                bool ok;
                {
                    py::gil_scoped_release nogil;
                    ok = lookup::load_upstream(path, c->n_vocab, &c->cache, &error);
                }
                if (!ok) throw CacheError(path, error);
                return c;
            },
            py::arg("path"), py::arg("n_vocab"))
        .def("__eq__",
             [](const PyNgramCache& a, const py::object& other) {
                 if (!py::isinstance<PyNgramCache>(other)) return false;
                 const PyNgramCache& b = other.cast<const PyNgramCache&>();
                 if (&a == &b) return true;
                 std::shared_lock la(a.mutex, std::defer_lock);
                 std::shared_lock lb(b.mutex, std::defer_lock);
                 std::lock(la, lb);
                 return a.n_vocab == b.n_vocab && caches_equal(a.cache, b.cache);
             })
        .def("__repr__", [](const PyNgramCache& c) {
            std::shared_lock l(c.mutex);
            return "NgramCache(n_vocab=" + std::to_string(c.n_vocab) + ", keys=" + std::to_string(c.cache.n_keys()) +
                   ", followers=" + std::to_string(c.cache.n_followers()) + ")";
        });
}

}  // namespace lookup_ext
