// A model's vocabulary read whole: every token's text through llama.cpp's own functions, which the
// caller passes as pointers (this library does not link llama.cpp). A Python loop over the
// 262,144 tokens of the default model took 1.4 s of every model start; a loop here takes tens of
// milliseconds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lookup {

// llama_token_to_piece, llama_vocab_get_text and llama_vocab_get_attr (llama.h), vocab opaque.
using TokenToPieceFn = int32_t (*)(const void* vocab, int32_t token, char* buf, int32_t length, int32_t lstrip,
                                   bool special);
using TokenTextFn = const char* (*)(const void* vocab, int32_t token);
using TokenAttrFn = int32_t (*)(const void* vocab, int32_t token);

// Texts of tokens 0..n-1 one after another: token i is bytes[offsets[i], offsets[i + 1]).
struct TokenTexts {
    std::string bytes;
    std::vector<uint32_t> offsets;
};

// Each token as the model writes it (llama_token_to_piece, no lstrip, special tokens as nothing).
TokenTexts token_pieces(TokenToPieceFn to_piece, const void* vocab, int32_t n_vocab);

// What the tokenizer fingerprint hashes: for each token id in order, the length of its stored text
// (uint32 LE), its attribute bits (int32 LE) and the text.
std::string vocabulary_record(TokenTextFn text, TokenAttrFn attr, const void* vocab, int32_t n_vocab);

// The ids of the tokens with a non-empty text, ordered by their texts' bytes (ties by id).
std::vector<int32_t> ids_by_text(const TokenTexts& texts);

}  // namespace lookup
