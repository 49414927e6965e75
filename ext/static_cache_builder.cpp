#include "bindings.h"

#include "static_cache_builder.h"

#include <string>
#include <utility>
#include <vector>

namespace lookup_ext {
namespace {

struct PyStaticCacheBuilder {
    explicit PyStaticCacheBuilder(int64_t vocab) : n_vocab(checked_vocab(vocab)), builder(n_vocab) {
        if (n_vocab > lookup::k_static_max_vocab) {
            throw py::value_error("vocabularies above " + std::to_string(lookup::k_static_max_vocab) +
                                  " tokens are not supported by the static cache");
        }
    }
    uint32_t n_vocab;
    lookup::StaticCacheBuilder builder;
};

// A builder's entries cross processes (a distributed build) as two numpy arrays: packed words
// (uint64) and counts (uint32). They arrive from other machines, so each is checked whole.
using WordArray = py::array_t<uint64_t, py::array::c_style>;
using CountArray = py::array_t<uint32_t, py::array::c_style>;

void add_builder_entries(PyStaticCacheBuilder& b, const py::array& words, const py::array& counts) {
    if (!py::isinstance<WordArray>(words) || !py::isinstance<CountArray>(counts) || words.ndim() != 1 ||
        counts.ndim() != 1) {
        throw py::value_error(
            "entries must be a contiguous 1-D uint64 array of words and a contiguous 1-D uint32 array of counts");
    }
    const auto w = WordArray::ensure(words);
    const auto c = CountArray::ensure(counts);
    if (w.size() != c.size()) throw py::value_error("entries must have as many counts as words");
    const size_t n = static_cast<size_t>(w.size());
    std::string error;
    bool ok;
    {
        py::gil_scoped_release nogil;
        ok = lookup::check_entries(w.data(), c.data(), n, b.n_vocab, &error);
        if (ok) b.builder.add_entries(w.data(), c.data(), n);
    }
    if (!ok) throw py::value_error(error);
}

// Hands the vectors to numpy without copying: each array owns its vector through a capsule.
template <class T>
py::array_t<T> owned_array(std::vector<T>&& values) {
    if (values.empty()) return py::array_t<T>(0);
    auto* owner = new std::vector<T>(std::move(values));
    py::capsule base(owner, [](void* p) { delete static_cast<std::vector<T>*>(p); });
    return py::array_t<T>(static_cast<py::ssize_t>(owner->size()), owner->data(), base);
}

py::tuple take_builder_entries(PyStaticCacheBuilder& b) {
    std::vector<uint64_t> words;
    std::vector<uint32_t> counts;
    {
        py::gil_scoped_release nogil;
        b.builder.take_entries(&words, &counts);
    }
    return py::make_tuple(owned_array(std::move(words)), owned_array(std::move(counts)));
}

}  // namespace

void bind_builder(py::module_& m) {
    py::class_<PyStaticCacheBuilder>(m, "StaticCacheBuilder")
        .def(py::init<int64_t>(), py::arg("n_vocab"))
        .def(
            "add",
            [](PyStaticCacheBuilder& b, const py::object& token_ids) {
                const TokenArray tokens = as_tokens(token_ids);
                check_tokens(tokens.data(), static_cast<size_t>(tokens.size()), b.n_vocab);
                py::gil_scoped_release nogil;
                b.builder.add(tokens.data(), static_cast<size_t>(tokens.size()));
            },
            py::arg("tokens"))
        .def(
            "add_cache",
            [](PyStaticCacheBuilder& b, const PyNgramCache& c) {
                if (c.n_vocab != b.n_vocab) throw py::value_error("caches of different vocabulary sizes");
                py::gil_scoped_release nogil;
                std::shared_lock l(c.mutex);
                c.cache.for_each([&](lookup::NgramKey key, const lookup::FollowerSpan& followers) {
                    if (lookup::key_size(key) != lookup::k_static_ngram) return;
                    for (const lookup::Follower& f : followers) {
                        if (f.count == 0) continue;  // a hole of a hashed span
                        b.builder.add_count(lookup::key_token(key, 0), lookup::key_token(key, 1), f.token, f.count);
                    }
                });
            },
            py::arg("cache"))
        .def("add_entries", &add_builder_entries, py::arg("words"), py::arg("counts"))
        .def("take_entries", &take_builder_entries)
        .def_property_readonly("n_tokens", [](const PyStaticCacheBuilder& b) { return b.builder.n_tokens(); })
        .def_property_readonly("memory_bytes", [](const PyStaticCacheBuilder& b) { return b.builder.memory_bytes(); })
        .def(
            "write",
            [](PyStaticCacheBuilder& b, const std::string& path, uint64_t fingerprint) {
                lookup::StaticHeader h{};
                std::string error;
                bool ok;
                {
                    py::gil_scoped_release nogil;
                    ok = b.builder.write(path, fingerprint, &h, &error);
                }
                if (!ok) raise_os_error(path, error);
                return header_dict(h);
            },
            py::arg("path"), py::arg("fingerprint"));
}

}  // namespace lookup_ext
