// The vocabulary readers, given llama.cpp's functions and vocabulary as addresses (ctypes hands
// them over; this module does not link llama.cpp). The loops run without the GIL.
#include "bindings.h"
#include "vocabulary_texts.h"

#include <algorithm>
#include <cstdint>

namespace lookup_ext {
namespace {

template <typename Fn>
Fn function_at(uintptr_t address) {
    if (address == 0) throw py::value_error("a null function address");
    return reinterpret_cast<Fn>(address);
}

const void* vocab_at(uintptr_t address, int64_t n_vocab) {
    if (address == 0) throw py::value_error("a null vocabulary address");
    if (n_vocab < 0 || n_vocab > INT32_MAX) throw py::value_error("n_vocab out of range");
    return reinterpret_cast<const void*>(address);
}

py::tuple token_pieces(uintptr_t to_piece, uintptr_t vocab, int64_t n_vocab) {
    const void* v = vocab_at(vocab, n_vocab);
    lookup::TokenTexts texts;
    {
        py::gil_scoped_release unlocked;
        texts = lookup::token_pieces(function_at<lookup::TokenToPieceFn>(to_piece), v, static_cast<int32_t>(n_vocab));
    }
    py::array_t<uint32_t> offsets(static_cast<py::ssize_t>(texts.offsets.size()));
    std::copy(texts.offsets.begin(), texts.offsets.end(), offsets.mutable_data());
    return py::make_tuple(py::bytes(texts.bytes), offsets);
}

py::bytes vocabulary_record(uintptr_t text, uintptr_t attr, uintptr_t vocab, int64_t n_vocab) {
    const void* v = vocab_at(vocab, n_vocab);
    std::string record;
    {
        py::gil_scoped_release unlocked;
        record = lookup::vocabulary_record(function_at<lookup::TokenTextFn>(text), function_at<lookup::TokenAttrFn>(attr),
                                           v, static_cast<int32_t>(n_vocab));
    }
    return py::bytes(record);
}

py::array_t<int32_t> ids_by_text(const py::bytes& bytes, const py::array_t<uint32_t, py::array::c_style | py::array::forcecast>& offsets) {
    lookup::TokenTexts texts;
    texts.bytes = std::string(bytes);
    const uint32_t* data = offsets.data();
    texts.offsets.assign(data, data + offsets.size());
    // Checked here, at the boundary: ascending offsets that start at 0 and end at the text's end.
    if (texts.offsets.empty() || texts.offsets.front() != 0 || texts.offsets.back() != texts.bytes.size() ||
        !std::is_sorted(texts.offsets.begin(), texts.offsets.end())) {
        throw py::value_error("offsets must ascend from 0 to the length of the bytes");
    }
    std::vector<int32_t> ids;
    {
        py::gil_scoped_release unlocked;
        ids = lookup::ids_by_text(texts);
    }
    py::array_t<int32_t> out(static_cast<py::ssize_t>(ids.size()));
    std::copy(ids.begin(), ids.end(), out.mutable_data());
    return out;
}

}  // namespace

void bind_vocabulary_texts(py::module_& m) {
    m.def("token_pieces", &token_pieces, py::arg("to_piece"), py::arg("vocab"), py::arg("n_vocab"),
          "Every token's text as the model writes it: (bytes, offsets), token i being "
          "bytes[offsets[i]:offsets[i + 1]]; to_piece is llama_token_to_piece's address.");
    m.def("vocabulary_record", &vocabulary_record, py::arg("text"), py::arg("attr"), py::arg("vocab"),
          py::arg("n_vocab"),
          "For each token in order: its stored text's length (uint32 LE), attributes (int32 LE) and "
          "text; text and attr are llama_vocab_get_text's and llama_vocab_get_attr's addresses.");
    m.def("ids_by_text", &ids_by_text, py::arg("bytes"), py::arg("offsets"),
          "The ids of the tokens with a non-empty text, ordered by their bytes (ties by id).");
}

}  // namespace lookup_ext
