// A file's windows for retrieval's similar-code search (text_windows.h), and a query's terms.
// Term lists (the left-out terms, a query) are checked at this boundary: sorted and distinct.
#include "bindings.h"
#include "text_windows.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string_view>
#include <functional>
#include <string>
#include <vector>

namespace lookup_ext {
namespace {

using TermArray = py::array_t<uint64_t, py::array::c_style | py::array::forcecast>;

std::vector<lookup::TermHash> checked_terms(const TermArray& terms, const char* what) {
    if (terms.ndim() != 1) throw py::value_error(std::string(what) + " must be a 1-D array of term hashes");
    const uint64_t* data = terms.data();
    std::vector<lookup::TermHash> out(data, data + terms.size());
    if (std::adjacent_find(out.begin(), out.end(), std::greater_equal<>()) != out.end()) {
        throw py::value_error(std::string(what) + " must be sorted and distinct (as query_terms returns them)");
    }
    return out;
}

std::string_view checked_text(const py::bytes& text) {
    const auto view = static_cast<std::string_view>(text);
    if (view.size() >= std::numeric_limits<uint32_t>::max()) throw py::value_error("a text of 4 GiB or more");
    return view;
}

py::array_t<uint64_t> as_array(const std::vector<lookup::TermHash>& terms) {
    py::array_t<uint64_t> out(static_cast<py::ssize_t>(terms.size()));
    std::copy(terms.begin(), terms.end(), out.mutable_data());
    return out;
}

struct PyTextWindows {
    lookup::TextWindows windows;
};

}  // namespace

void bind_text_windows(py::module_& m) {
    m.def(
        "query_terms",
        [](const py::bytes& text, const TermArray& left_out) {
            const std::string_view view = checked_text(text);
            const std::vector<lookup::TermHash> excluded = checked_terms(left_out, "left_out");
            std::vector<lookup::TermHash> found;
            {
                py::gil_scoped_release nogil;
                found = lookup::query_terms(view, excluded);
            }
            return as_array(found);
        },
        py::arg("text"), py::arg("left_out"),
        "The hashes of text's terms (pieces of identifiers cut at _ and lower-to-upper case, "
        "lowercased, 3 characters or more) that start with a letter and are not in left_out "
        "(sorted hashes): sorted, distinct.");

    py::class_<PyTextWindows>(m, "TextWindows")
        .def(py::init([](const py::bytes& text, int64_t block_lines, const TermArray& left_out) {
                 if (block_lines < 1 || block_lines > 1 << 16) throw py::value_error("block_lines must be in [1, 65536]");
                 const std::string_view view = checked_text(text);
                 const std::vector<lookup::TermHash> excluded = checked_terms(left_out, "left_out");
                 PyTextWindows out;
                 {
                     py::gil_scoped_release nogil;
                     out.windows = lookup::text_windows(view, static_cast<uint32_t>(block_lines), excluded);
                 }
                 return out;
             }),
             py::arg("text"), py::arg("block_lines"), py::arg("left_out"),
             "text's blocks of block_lines lines (split at \\n), each known by its distinct terms not in "
             "left_out (sorted hashes); window w is blocks w and w + 1.")
        .def_property_readonly("windows", [](const PyTextWindows& self) { return self.windows.windows(); })
        .def(
            "similarities",
            [](const PyTextWindows& self, const TermArray& query) {
                const std::vector<lookup::TermHash> terms = checked_terms(query, "query");
                py::array_t<double> out(static_cast<py::ssize_t>(self.windows.windows()));
                double* data = out.mutable_data();
                {
                    py::gil_scoped_release nogil;
                    lookup::window_similarities(self.windows, terms.data(), terms.size(), data);
                }
                return out;
            },
            py::arg("query"),
            "Each window's Jaccard similarity to query (sorted, distinct hashes, as query_terms "
            "returns them): shared terms over the terms of either.");
}

}  // namespace lookup_ext
