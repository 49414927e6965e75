// A fuzzer for the folder table format (folder_table_format.h): FolderTable::open_memory, verify,
// find, WorkspaceLayers' merge over it and drafting, over raw bytes and over structured
// mutations of valid tables, each input placed in a guarded buffer (fuzz_harness.h: its last page
// followed by an inaccessible page, the bytes between its end and that page poisoned for
// AddressSanitizer), so that a read even one byte outside the file stops the run. The folder
// table is mapped from the user's own cache folder, but the promise in folder_table.h is that
// any bytes give wrong drafts at worst: this is what holds it to that.
//
// An input is one flags byte and the file. Flag bit 0: before opening, set the header's
// file_size to the file's size and recompute the checksum, so that what find() does behind a
// valid checksum is what is tested (most structured mutations set it).
//
// Before any input, the seed tables (built by the real writer, several of them in many
// partitions) are checked against an NgramCache of the same documents: every key, its followers
// and counts, the keys below min_count left out, the stream walked record by record; and the
// layers (table + added - removed) against an NgramCache of the edited documents.
//
// Two builds of the same file:
//   standalone (any C++17 compiler, what `make fuzz` builds with g++ -fsanitize=address,undefined):
//     folder_table_fuzz [--runs N] [--seed S] [FILE ...]   replays FILEs (inputs as above), or
//     mutates built-in seed tables N times; prints the inputs tried and how many opened and verified.
//   libFuzzer (clang++ -fsanitize=fuzzer,address,undefined -DLOOKUP_LIBFUZZER): the same target
//     and structured mutator; an empty corpus starts from the built-in seeds.
#include "checksum.h"
#include "drafter.h"
#include "folder_table.h"
#include "folder_table_builder.h"
#include "folder_table_format.h"
#include "fuzz_harness.h"
#include "ngram_cache.h"
#include "workspace_layers.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <vector>

const char fuzz::k_name[] = "folder_table_fuzz";

namespace {

using fuzz::Bytes;
using fuzz::check_message;
using fuzz::fail;
using fuzz::Outcome;
using lookup::FolderTable;
using lookup::FolderTableHeader;
using lookup::Follower;
using lookup::FollowerSpan;
using lookup::NgramCache;
using lookup::NgramKey;
using lookup::token_t;
using Tokens = std::vector<token_t>;

constexpr size_t k_header = sizeof(FolderTableHeader);
constexpr size_t k_head = lookup::k_folder_record_head;

void fix_checksum(uint8_t* file, size_t size) {
    if (size < k_header) return;
    FolderTableHeader h;
    std::memcpy(&h, file, sizeof h);
    h.file_size = size;
    h.checksum = lookup::checksum(file + k_header, size - k_header);
    std::memcpy(file, &h, sizeof h);
}

std::string describe(NgramKey key) {
    std::string s = "(";
    for (int i = 0; i < lookup::key_size(key); ++i) s += (i > 0 ? " " : "") + std::to_string(lookup::key_token(key, i));
    return s + ")";
}

std::string describe(const std::vector<Follower>& followers) {
    std::string s = "[";
    for (const Follower& f : followers) s += (s.size() > 1 ? " " : "") + std::to_string(f.token) + ":" + std::to_string(f.count);
    return s + "]";
}

bool same(const std::vector<Follower>& a, const std::vector<Follower>& b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](const Follower& x, const Follower& y) {
               return x.token == y.token && x.count == y.count;
           });
}

// What every reader of a span relies on: the drafter's precheck trusts sum and max_count, the
// merge trusts a sorted span's order, and a token at or past n_vocab would reach the model.
// Holes (zero counts) belong to hashed NgramCache spans only, never to what the table copies out.
// A corrupt table may repeat a token; the merge keeps both, so a merged span over one is only
// held to ascending order, not to strictly ascending (wrong drafts at worst, as promised).
void check_span(const FollowerSpan& span, uint64_t n_vocab, bool holes_allowed, const char* what, NgramKey key,
                bool repeats_allowed = false) {
    if (span.size > 0 && span.data == nullptr) fail(what, "a span without data");
    uint64_t sum = 0;
    token_t last = -1;
    for (const Follower& f : span) {
        if (f.count == 0) {
            if (!holes_allowed || span.sorted) fail(what, "a zero count for key " + describe(key));
            continue;
        }
        if (f.token < 0 || static_cast<uint64_t>(f.token) >= n_vocab) {
            fail(what, "token " + std::to_string(f.token) + " outside the vocabulary of " + std::to_string(n_vocab) +
                           " for key " + describe(key));
        }
        if (span.sorted && (f.token < last || (f.token == last && !repeats_allowed))) {
            fail(what, "a sorted span out of order for key " + describe(key) + ": " +
                           describe(std::vector<Follower>(span.begin(), span.end())));
        }
        if (f.count > span.max_count) fail(what, "max_count below a count for key " + describe(key));
        last = f.token;
        sum += f.count;
    }
    if (sum != span.sum) {
        fail(what, "sum " + std::to_string(span.sum) + " where the counts add up to " + std::to_string(sum) +
                       " for key " + describe(key));
    }
}

// The layers' rule, written out independently of the merge: per follower table + added -
// removed, never below zero, clamped to 32 bits. Only meaningful where each input has one entry
// per token (a corrupt table may repeat a token; the merge is then free to be wrong).
std::vector<Follower> layered(const std::vector<Follower>& table, const std::vector<Follower>& added,
                              const std::vector<Follower>& removed) {
    std::map<token_t, int64_t> counts;
    for (const Follower& f : table) counts[f.token] += f.count;
    for (const Follower& f : added) counts[f.token] += f.count;
    for (const Follower& f : removed) {
        const auto it = counts.find(f.token);
        if (it != counts.end()) it->second = std::max<int64_t>(0, it->second - f.count);
    }
    std::vector<Follower> out;
    for (const auto& [token, count] : counts) {
        if (count > 0) out.push_back({token, static_cast<uint32_t>(std::min<int64_t>(count, UINT32_MAX))});
    }
    return out;
}

bool distinct_tokens(const std::vector<Follower>& sorted) {
    return std::adjacent_find(sorted.begin(), sorted.end(), [](const Follower& a, const Follower& b) {
               return a.token == b.token;
           }) == sorted.end();
}

// The n-grams of a document that end at each position, whether a follower comes after or not
// (a key with none must not be found).
void ngram_keys(const Tokens& doc, std::vector<NgramKey>& out) {
    for (size_t i = 1; i <= doc.size(); ++i) {
        for (size_t n = 1; n <= static_cast<size_t>(lookup::k_ngram_max) && n <= i; ++n) {
            out.push_back(lookup::make_key(doc.data() + i - n, static_cast<int>(n)));
        }
    }
}

NgramCache cache_of(const std::vector<Tokens>& documents) {
    NgramCache cache;
    for (const Tokens& d : documents) cache.add(d.data(), d.size());
    return cache;
}

// ---------------------------------------------------------------------------------------------
// Reading a file's layout as the mutator and the seed check need it: only a header whose sizes
// agree with the file's gives offsets worth aiming at.

struct Layout {
    FolderTableHeader h{};
    size_t n_buckets = 0;  // entries in the index, 2^bucket_bits + 1
    bool consistent = false;
};

Layout layout_of(const uint8_t* file, size_t size) {
    Layout l;
    if (size < k_header) return l;
    std::memcpy(&l.h, file, k_header);
    if (l.h.bucket_bits < lookup::k_folder_table_min_bits || l.h.bucket_bits > 24 || l.h.stream_bytes % 8 != 0 ||
        l.h.stream_bytes > size || lookup::folder_table_size(l.h.stream_bytes, l.h.bucket_bits) != size) {
        return l;
    }
    l.n_buckets = (size_t{1} << l.h.bucket_bits) + 1;
    l.consistent = true;
    return l;
}

uint64_t bucket_at(const uint8_t* file, const Layout& l, size_t b) {
    uint64_t v;
    std::memcpy(&v, file + k_header + l.h.stream_bytes + 8 * b, 8);
    return v;
}

// A record's head, read from the bytes as folder_table_format.h lays it out rather than through
// FolderTable, so that a mistake in find() is not the check's as well.
NgramKey key_at(const uint8_t* stream, uint64_t at) {
    NgramKey key;
    std::memcpy(&key.lo, stream + at, 8);
    std::memcpy(&key.hi, stream + at + 8, 8);
    return key;
}

uint32_t n_followers_at(const uint8_t* stream, uint64_t at) {
    uint32_t n;
    std::memcpy(&n, stream + at + 16, 4);
    return n;
}

struct RecordAt {
    size_t at;  // offset in the stream
    uint32_t n;
    [[nodiscard]] size_t bytes() const { return k_head + sizeof(Follower) * size_t{n}; }
};

// The records reachable through the index, walked as find() walks them and bounded the same
// way, at most `limit` of them.
std::vector<RecordAt> records_of(const uint8_t* file, const Layout& l, size_t limit) {
    std::vector<RecordAt> out;
    if (!l.consistent) return out;
    const uint8_t* stream = file + k_header;
    for (size_t b = 0; b + 1 < l.n_buckets && out.size() < limit; ++b) {
        const uint64_t begin = bucket_at(file, l, b), end = bucket_at(file, l, b + 1);
        if (begin > end || end > l.h.stream_bytes) continue;
        for (uint64_t at = begin; end - at >= k_head && out.size() < limit;) {
            const uint32_t n = n_followers_at(stream, at);
            if (n > (end - at - k_head) / sizeof(Follower)) break;
            out.push_back({static_cast<size_t>(at), n});
            at += out.back().bytes();
        }
    }
    return out;
}

// ---------------------------------------------------------------------------------------------
// Seeds: valid tables of a few shapes, built by the real writer, checked against NgramCache.

struct Seed {
    Bytes input;  // flags byte + file
    std::vector<Tokens> documents;
    uint32_t n_vocab;
    uint32_t min_count;
};

struct Shape {
    uint32_t n_vocab;
    size_t n_documents;
    size_t n_tokens;  // per document
    uint32_t min_count;
    size_t memory_limit;
    bool hub;  // one token followed by most of the vocabulary: NgramCache's hashed spans
};

// Documents made of a few recurring phrases and noise, so that keys recur with several
// followers and counts reach min_count; a hub document gives one key more than the 32
// followers NgramCache keeps sorted, so that the writer's re-sorting is exercised.
std::vector<Tokens> make_documents(const Shape& shape, std::mt19937_64& rng) {
    std::vector<Tokens> phrases(6);
    for (Tokens& p : phrases) {
        p.resize(2 + rng() % 6);
        for (token_t& t : p) t = static_cast<token_t>(rng() % shape.n_vocab);
    }
    std::vector<Tokens> documents(shape.n_documents);
    for (size_t d = 0; d < documents.size(); ++d) {
        Tokens& doc = documents[d];
        while (doc.size() < shape.n_tokens) {
            if (shape.hub && d == 0) {
                doc.push_back(0);
                doc.push_back(static_cast<token_t>(1 + rng() % (shape.n_vocab - 1)));
            } else if (rng() % 3 == 0) {
                doc.push_back(static_cast<token_t>(rng() % 2 == 0 ? shape.n_vocab - 1 : rng() % shape.n_vocab));
            } else {
                const Tokens& p = phrases[rng() % phrases.size()];
                doc.insert(doc.end(), p.begin(), p.end());
            }
        }
        doc.resize(shape.n_tokens);
    }
    return documents;
}

// An edit of one document as the daemon sees files change: tokens replaced, inserted, removed,
// the tail cut.
Tokens edited(const Tokens& doc, uint32_t n_vocab, std::mt19937_64& rng) {
    Tokens out = doc;
    const int edits = 1 + static_cast<int>(rng() % 6);
    for (int e = 0; e < edits; ++e) {
        const size_t at = out.empty() ? 0 : rng() % (out.size() + 1);
        const auto token = static_cast<token_t>(rng() % n_vocab);
        switch (rng() % 4) {
            case 0:
                if (at < out.size()) out[at] = token;
                break;
            case 1: out.insert(out.begin() + static_cast<long>(at), token); break;
            case 2:
                if (at < out.size()) out.erase(out.begin() + static_cast<long>(at));
                break;
            default: out.resize(at);
        }
    }
    return out;
}

// The record-by-record check of a file the writer produced: every record in the bucket its key
// hashes to, ascending by key within it, followers ascending with counts equal to `reference`
// and a total >= min_count, nothing but the final padding left unparsed.
void check_stream(const uint8_t* file, size_t size, const NgramCache& reference) {
    const Layout l = layout_of(file, size);
    if (!l.consistent) fail("seed", "inconsistent layout");
    const uint8_t* stream = file + k_header;
    uint64_t records = 0;
    if (bucket_at(file, l, 0) != 0 || bucket_at(file, l, l.n_buckets - 1) != l.h.stream_bytes) {
        fail("seed", "the index does not span the stream");
    }
    for (size_t b = 0; b + 1 < l.n_buckets; ++b) {
        const uint64_t begin = bucket_at(file, l, b), end = bucket_at(file, l, b + 1);
        if (begin > end) fail("seed", "bucket " + std::to_string(b) + " ends before it starts");
        uint64_t at = begin;
        bool first = true;
        NgramKey last{};
        while (end - at >= k_head) {
            const NgramKey key = key_at(stream, at);
            const uint32_t n = n_followers_at(stream, at);
            at += k_head;
            if (uint64_t{n} * sizeof(Follower) > end - at) fail("seed", "a record runs past its bucket");
            if (lookup::folder_bucket(key, l.h.bucket_bits) != b) fail("seed", "key " + describe(key) + " in the wrong bucket");
            if (!first && !(last < key)) fail("seed", "keys out of order in bucket " + std::to_string(b));
            first = false;
            last = key;
            std::vector<Follower> followers(n);
            if (n > 0) std::memcpy(followers.data(), stream + at, n * sizeof(Follower));
            at += n * sizeof(Follower);
            const std::vector<Follower> expected = lookup::sorted_followers(reference.find(key));
            if (!same(followers, expected)) {
                fail("seed", "record " + describe(key) + " holds " + describe(followers) + ", counted " + describe(expected));
            }
            uint64_t sum = 0;
            for (const Follower& f : followers) sum += f.count;
            if (sum < l.h.min_count) fail("seed", "key " + describe(key) + " below min_count written");
            ++records;
        }
        if (at != end && end != l.h.stream_bytes) fail("seed", "bytes left over in bucket " + std::to_string(b));
        for (uint64_t i = at; i < end; ++i) {
            if (stream[i] != 0) fail("seed", "non-zero padding");
        }
        if (end - at >= 8) fail("seed", "padding of 8 bytes or more");
    }
    if (records != l.h.n_keys) fail("seed", std::to_string(records) + " records, the header says " + std::to_string(l.h.n_keys));
}

// The seed table against NgramCaches of the same documents, through the layers the drafter
// reads. min_count 1 prunes nothing, so there the layers must equal the cache of the edited
// documents exactly; with pruning they must follow the layered rule over what the table kept.
void check_seed(const Seed& seed, const lookup::FolderTableBuild& stats, std::mt19937_64& rng, uint64_t* keys_checked) {
    const size_t size = seed.input.size() - 1;
    fuzz::GuardedBuffer buffer(seed.input.data() + 1, size);
    const uint8_t* file = buffer.seal();
    FolderTable table;
    std::string error;
    if (!table.open_memory(file, size, &error) || !table.verify(&error)) fail("seed", "a built table: " + error);
    const FolderTableHeader& h = table.header();
    if (h.n_vocab != seed.n_vocab || h.min_count != seed.min_count) fail("seed", "header differs from the build");
    const NgramCache reference = cache_of(seed.documents);
    check_stream(file, size, reference);

    uint64_t qualifying = 0;
    reference.for_each([&](NgramKey, const FollowerSpan& span) { qualifying += span.sum >= seed.min_count ? 1 : 0; });
    if (h.n_keys != qualifying || stats.n_keys != qualifying) {
        fail("seed", std::to_string(h.n_keys) + " keys written, " + std::to_string(qualifying) + " reach min_count");
    }
    if (stats.n_keys_seen != reference.n_keys()) {
        fail("seed", std::to_string(stats.n_keys_seen) + " keys counted, NgramCache holds " + std::to_string(reference.n_keys()));
    }
    if (stats.file_size != size) fail("seed", "stats' file_size differs from the file");

    std::vector<NgramKey> keys;
    for (const Tokens& d : seed.documents) ngram_keys(d, keys);
    // Keys no document holds, and keys across two documents (no n-gram spans two of them).
    for (int i = 0; i < 64; ++i) {
        token_t t[4];
        for (token_t& x : t) x = static_cast<token_t>(rng() % seed.n_vocab);
        keys.push_back(lookup::make_key(t, 1 + static_cast<int>(rng() % 4)));
    }
    for (size_t d = 0; d + 1 < seed.documents.size(); ++d) {
        Tokens joined = seed.documents[d];
        joined.insert(joined.end(), seed.documents[d + 1].begin(), seed.documents[d + 1].end());
        ngram_keys(joined, keys);
    }

    const NgramCache empty;
    const lookup::WorkspaceLayers alone{&empty, nullptr, &table};
    std::vector<Follower> scratch;
    for (const NgramKey key : keys) {
        const FollowerSpan counted = reference.find(key);
        const std::vector<Follower> expected =
            counted.sum >= seed.min_count ? lookup::sorted_followers(counted) : std::vector<Follower>{};
        const FollowerSpan direct = table.find(key, scratch);
        check_span(direct, h.n_vocab, false, "seed find", key);
        if (!same(lookup::sorted_followers(direct), expected)) {
            fail("seed find", "key " + describe(key) + ": table " + describe(lookup::sorted_followers(direct)) +
                                  ", NgramCache " + describe(expected) + " (min_count " + std::to_string(seed.min_count) + ")");
        }
        const FollowerSpan through = alone.find(key);
        check_span(through, h.n_vocab, true, "seed layers", key);
        if (!same(lookup::sorted_followers(through), expected)) {
            fail("seed layers", "key " + describe(key) + ": layers " + describe(lookup::sorted_followers(through)) +
                                    ", NgramCache " + describe(expected));
        }
        ++*keys_checked;
    }

    // One document replaced by an edit of it (or by nothing): removed holds the table's part,
    // added the new text.
    for (size_t round = 0; round < std::min<size_t>(seed.documents.size(), 3); ++round) {
        const size_t j = rng() % seed.documents.size();
        std::vector<Tokens> now = seed.documents;
        now[j] = rng() % 4 == 0 ? Tokens{} : edited(seed.documents[j], seed.n_vocab, rng);
        NgramCache removed, added;
        removed.add(seed.documents[j].data(), seed.documents[j].size());
        added.add(now[j].data(), now[j].size());
        const NgramCache current = cache_of(now);
        const lookup::WorkspaceLayers layers{&added, &removed, &table};
        std::vector<NgramKey> edit_keys = keys;
        ngram_keys(now[j], edit_keys);
        for (const NgramKey key : edit_keys) {
            const FollowerSpan got = layers.find(key);
            check_span(got, h.n_vocab, true, "seed edit", key);
            const std::vector<Follower> merged = lookup::sorted_followers(got);
            std::vector<Follower> expected;
            if (seed.min_count <= 1) {
                expected = lookup::sorted_followers(current.find(key));
            } else {
                const FollowerSpan counted = reference.find(key);
                expected = layered(counted.sum >= seed.min_count ? lookup::sorted_followers(counted) : std::vector<Follower>{},
                                   lookup::sorted_followers(added.find(key)), lookup::sorted_followers(removed.find(key)));
            }
            if (!same(merged, expected)) {
                fail("seed edit", "document " + std::to_string(j) + " edited, key " + describe(key) + ": layers " +
                                      describe(merged) + ", expected " + describe(expected) + " (min_count " +
                                      std::to_string(seed.min_count) + ")");
            }
            ++*keys_checked;
        }
    }
}

struct Seeds {
    std::vector<Bytes> inputs;      // the seed tables, each checked against NgramCache
    std::vector<NgramKey> keys;     // real n-grams of the seed documents, to look up in any input
    std::vector<Tokens> documents;  // to draft from and to fill the added and removed layers
    uint64_t keys_checked = 0;
};

Seeds build_seeds() {
    std::mt19937_64 rng(30);
    // 4096 bytes hold the counts of a few dozen tokens (the writer reckons 96 bytes a token, less
    // the index, and a cache is at least 2 KiB), so those builds take many passes; 256 MiB one.
    const Shape shapes[] = {
        {50, 0, 0, 1, 1 << 20},      {50, 3, 1, 1, 1 << 20},       {50, 3, 6, 1, 1 << 20},
        {50, 4, 250, 1, 4096, false}, {50, 4, 250, 2, 4096, false}, {300, 3, 300, 1, 4096, true},
        {300, 4, 200, 2, 1 << 20, true}, {4, 2, 150, 3, 4096, false}, {300, 2, 500, 1, size_t{1} << 28, true},
    };
    Seeds seeds;
    std::vector<Seed> tables;
    std::vector<lookup::FolderTableBuild> built;
    {
        fuzz::SeedFile file("seed.table");  // gone before the checks, whose failures abort
        for (const Shape& shape : shapes) {
            Seed seed{{}, make_documents(shape, rng), shape.n_vocab, shape.min_count};
            std::vector<lookup::TokenView> views;
            for (const Tokens& d : seed.documents) views.push_back({d.data(), d.size()});
            lookup::FolderTableBuild stats;
            std::string error;
            // Two threads: the passes after the first are shared, and their records must still
            // come out in bucket order.
            const lookup::FolderTableOptions options{shape.n_vocab, rng(), shape.min_count, shape.memory_limit, false, 2};
            if (!lookup::build_folder_table(views, options, file.path(), &stats, &error)) {
                file.fail("seed", error);
            }
            seed.input = file.input();
            // A shape meant to split must split, or the partitioned writer goes untested.
            if (shape.memory_limit == 4096 && stats.passes < 2) file.fail("seed", "a small memory limit, one pass");
            for (const Tokens& d : seed.documents) {
                ngram_keys(d, seeds.keys);
                if (!d.empty()) seeds.documents.push_back(d);
            }
            tables.push_back(std::move(seed));
            built.push_back(stats);
        }
    }
    for (size_t i = 0; i < tables.size(); ++i) check_seed(tables[i], built[i], rng, &seeds.keys_checked);
    for (Seed& t : tables) seeds.inputs.push_back(std::move(t.input));
    return seeds;
}

const Seeds& seeds() {
    static const Seeds built = build_seeds();
    return built;
}

// ---------------------------------------------------------------------------------------------
// One input.

struct Tally {
    uint64_t found = 0;    // look-ups that returned followers
    uint64_t drafted = 0;  // tokens drafted
};
Tally g_tally;

Tokens slice(const Tokens& doc, std::mt19937_64& rng, size_t max_length, uint32_t vocab) {
    const size_t begin = rng() % doc.size();
    const size_t length = std::min(doc.size() - begin, 1 + rng() % max_length);
    Tokens out(doc.begin() + static_cast<long>(begin), doc.begin() + static_cast<long>(begin + length));
    for (token_t& t : out) t = static_cast<token_t>(static_cast<uint32_t>(t) % vocab);
    return out;
}

void check_drafts(const token_t* known, size_t n_known, const lookup::DraftCaches& sources, uint64_t n_vocab) {
    constexpr size_t k_draft = 8, k_branches = 4;
    token_t out[k_draft];
    lookup::DraftEvidence evidence[k_draft];
    const size_t n = lookup::draft(known, n_known, sources, k_draft, out, evidence);
    if (n > k_draft) fail("draft", "more tokens than asked for");
    for (size_t i = 0; i < n; ++i) {
        if (out[i] < 0 || static_cast<uint64_t>(out[i]) >= n_vocab) fail("draft", "token outside the vocabulary");
        if (evidence[i].token != out[i]) fail("draft", "evidence for another token");
    }
    // Exactly the room the contract promises to stay within, so that ASan sees a write past it.
    std::vector<token_t> tokens(k_draft * k_branches);
    std::vector<int32_t> parents(k_draft * k_branches);
    std::vector<lookup::DraftEvidence> tree_evidence(k_draft * k_branches);
    const size_t nodes =
        lookup::draft_tree(known, n_known, sources, k_draft, k_branches, tokens.data(), parents.data(), tree_evidence.data());
    if (nodes > tokens.size()) fail("draft_tree", "more nodes than max_branches * n_draft");
    for (size_t i = 0; i < nodes; ++i) {
        if (tokens[i] < 0 || static_cast<uint64_t>(tokens[i]) >= n_vocab) fail("draft_tree", "token outside the vocabulary");
        if (parents[i] < -1 || parents[i] >= static_cast<int32_t>(i)) fail("draft_tree", "a parent after its child");
        if (tree_evidence[i].token != tokens[i]) fail("draft_tree", "evidence for another token");
    }
    if (nodes < n || !std::equal(out, out + n, tokens.begin())) fail("draft_tree", "branch 0 is not draft()");
    g_tally.drafted += n;
}

// Everything a reader may do with an open table, verified or not: find() and the layers trust
// nothing, and the drafter reads the table through them without verifying it either.
Outcome exercise(const uint8_t* file, size_t size) {
    FolderTable table;
    std::string error;
    if (!table.open_memory(file, size, &error)) {
        check_message(error);
        return Outcome::refused;
    }
    const FolderTableHeader& h = table.header();
    const uint64_t vocab = h.n_vocab;
    // Tokens of the layers and the context kept inside the table's vocabulary, so that any
    // token drafted outside it is the table's doing.
    const auto small_vocab = static_cast<uint32_t>(std::min<uint64_t>(vocab, 1024));
    const uint64_t max_followers = h.stream_bytes >= k_head ? (h.stream_bytes - k_head) / sizeof(Follower) : 0;
    std::mt19937_64 rng(h.checksum ^ (h.stream_bytes << 7) ^ size);
    const Seeds& s = seeds();

    std::vector<NgramKey> keys;
    for (int i = 0; i < 24; ++i) {
        token_t t[4];
        const uint64_t bound = i % 2 == 0 ? vocab : small_vocab;
        for (token_t& x : t) x = static_cast<token_t>(rng() % bound);
        keys.push_back(lookup::make_key(t, 1 + static_cast<int>(rng() % 4)));
    }
    for (int i = 0; i < 24; ++i) keys.push_back(s.keys[rng() % s.keys.size()]);
    // Keys the file itself holds at bucket starts, whatever their bits, so that mutated records
    // are found and copied out rather than skipped.
    const Layout l = layout_of(file, size);
    if (l.consistent) {
        for (int i = 0; i < 24; ++i) {
            const uint64_t at = bucket_at(file, l, rng() % (l.n_buckets - 1));
            if (at > l.h.stream_bytes || l.h.stream_bytes - at < 16) continue;
            keys.push_back(key_at(file + k_header, at));
        }
    }

    std::vector<Follower> scratch;
    for (const NgramKey key : keys) {
        const FollowerSpan span = table.find(key, scratch);
        check_span(span, vocab, false, "find", key);
        if (span.size > max_followers) fail("find", "more followers than the stream could hold");
        if (l.consistent && !span.empty()) {
            // A record lies inside its key's bucket, so the bucket's room bounds what it holds.
            const uint64_t b = lookup::folder_bucket(key, l.h.bucket_bits);
            const uint64_t begin = bucket_at(file, l, b), end = bucket_at(file, l, b + 1);
            if (begin > end || end > l.h.stream_bytes || end - begin < k_head ||
                span.size > (end - begin - k_head) / sizeof(Follower)) {
                fail("find", "followers for key " + describe(key) + " from outside its bucket");
            }
        }
        g_tally.found += span.empty() ? 0 : 1;
    }
    Outcome outcome = Outcome::opened;
    if (table.verify(&error)) {
        outcome = Outcome::verified;
    } else {
        check_message(error);
    }

    // The layers: a stretch of a seed document taken out, an edit of it put in.
    const Tokens& doc = s.documents[rng() % s.documents.size()];
    const Tokens old_part = slice(doc, rng, 48, small_vocab);
    const Tokens new_part = edited(old_part, small_vocab, rng);
    Tokens context_tokens = slice(s.documents[rng() % s.documents.size()], rng, 24, small_vocab);
    for (int i = 0; i < 8; ++i) context_tokens.push_back(static_cast<token_t>(rng() % small_vocab));
    NgramCache removed, added, context;
    removed.add(old_part.data(), old_part.size());
    added.add(new_part.data(), new_part.size());
    context.add(context_tokens.data(), context_tokens.size());
    ngram_keys(new_part, keys);
    const lookup::WorkspaceLayers layers{&added, &removed, &table};
    for (const NgramKey key : keys) {
        const std::vector<Follower> base = lookup::sorted_followers(table.find(key, scratch));
        const std::vector<Follower> plus = lookup::sorted_followers(added.find(key));
        const std::vector<Follower> minus = lookup::sorted_followers(removed.find(key));
        const FollowerSpan got = layers.find(key);
        check_span(got, vocab, true, "layers", key, !distinct_tokens(base));
        if (distinct_tokens(base)) {
            const std::vector<Follower> merged = lookup::sorted_followers(got);
            const std::vector<Follower> expected = layered(base, plus, minus);
            if (!same(merged, expected)) {
                fail("layers", "key " + describe(key) + ": table " + describe(base) + " + " + describe(plus) + " - " +
                                   describe(minus) + " gave " + describe(merged) + ", expected " + describe(expected));
            }
        }
    }

    // Drafting from where the seed documents go on, so that the table decides some tokens.
    lookup::DraftCaches sources{&context, lookup::WorkspaceLayers{&added, &removed, &table}, nullptr};
    for (int i = 0; i < 3; ++i) {
        const Tokens known = slice(s.documents[rng() % s.documents.size()], rng, 12, small_vocab);
        check_drafts(known.data(), known.size(), sources, vocab);
    }
    const Tokens known = slice(new_part.empty() ? doc : new_part, rng, 12, small_vocab);
    check_drafts(known.data(), known.size(), sources, vocab);
    sources.context = nullptr;
    sources.workspace.removed = nullptr;
    check_drafts(known.data(), known.size(), sources, vocab);
    return outcome;
}

Outcome run_one(const uint8_t* data, size_t size) { return fuzz::run_one(data, size, fix_checksum, exercise); }

// ---------------------------------------------------------------------------------------------
// Structured mutations: header fields, bucket offsets, record heads and followers, set to
// values near the bounds find() checks; records swapped; the index rebuilt for other bucket
// bits; the stream grown or cut with the header made to match, so that the result still opens.

class Mutator : public fuzz::MutatorBase<Mutator> {
public:
    using MutatorBase::MutatorBase;
    static constexpr size_t k_header_size = k_header;
    static constexpr unsigned k_raw_one_in = 5;

    // A value near `near` or a boundary, or a record head further or not quite. The record
    // heads keep the numbers 7 and 8 they had before the choices were shared, so that a seed
    // still gives the inputs it gave.
    uint64_t interesting(uint64_t near, uint64_t bound) {
        const uint64_t pick = below(k_interesting + 2);
        if (pick == 7) return near + k_head - 8 * below(3);
        if (pick == 8) return near - k_head + 8 * below(3);
        return interesting_at(pick < 7 ? pick : pick - 2, near, bound);
    }

private:
    friend MutatorBase;

    // The header rewritten for a stream of `stream_bytes` and `bits`, the index placed after it.
    static void set_layout(Bytes& input, FolderTableHeader h, uint64_t stream_bytes, uint32_t bits) {
        h.stream_bytes = stream_bytes;
        h.bucket_bits = bits;
        h.file_size = lookup::folder_table_size(stream_bytes, bits);
        std::memcpy(input.data() + 1, &h, k_header);
    }

    void structured(Bytes& input, size_t max_size) {
        constexpr size_t h0 = 1;  // the file starts after the flags byte
        const size_t file_size = input.size() - h0;
        const Layout l = layout_of(input.data() + h0, file_size);
        const FolderTableHeader& h = l.h;
        const size_t stream = h0 + k_header;                   // where the stream starts in `input`
        const size_t index = stream + static_cast<size_t>(h.stream_bytes);  // where the index does
        const unsigned kind = static_cast<unsigned>(below(11));
        if (!l.consistent || kind == 0) {  // one header field
            switch (below(8)) {
                case 0: {
                    static const uint32_t bits[] = {0, 1, 3, 4, 5, 24, 29, 30, 31, 32, 63, 64};
                    put<uint32_t>(input, h0 + offsetof(FolderTableHeader, bucket_bits),
                                  chance(2) ? bits[below(std::size(bits))] : static_cast<uint32_t>(h.bucket_bits + below(3) - 1));
                    break;
                }
                case 1:
                    put<uint32_t>(input, h0 + offsetof(FolderTableHeader, n_vocab),
                                  static_cast<uint32_t>(interesting(h.n_vocab, 0x7FFFFFFFu)));
                    break;
                case 2:
                    put<uint32_t>(input, h0 + offsetof(FolderTableHeader, format_version),
                                  static_cast<uint32_t>(interesting(h.format_version, lookup::k_folder_table_version)));
                    break;
                case 3:
                    put<uint32_t>(input, h0 + offsetof(FolderTableHeader, min_count),
                                  static_cast<uint32_t>(interesting(h.min_count, 2)));
                    break;
                case 4:
                    put<uint64_t>(input, h0 + offsetof(FolderTableHeader, stream_bytes),
                                  interesting(h.stream_bytes, file_size));
                    break;
                case 5:
                    put<uint64_t>(input, h0 + offsetof(FolderTableHeader, file_size), interesting(h.file_size, file_size));
                    break;
                case 6:
                    put<uint64_t>(input, h0 + offsetof(FolderTableHeader, n_keys), interesting(h.n_keys, file_size));
                    break;
                default:
                    input[h0 + below(sizeof h.magic)] ^= static_cast<uint8_t>(1u << below(8));
            }
            return;
        }
        const size_t n_buckets = l.n_buckets;
        switch (kind) {
            case 1: {  // one bucket offset
                const size_t at = index + 8 * below(n_buckets);
                put<uint64_t>(input, at, interesting(get<uint64_t>(input, at), h.stream_bytes));
                break;
            }
            case 2: {  // a range of buckets claiming the same offset
                const size_t from = below(n_buckets);
                const uint64_t value = chance(2) ? get<uint64_t>(input, index + 8 * below(n_buckets))
                                                 : interesting(h.stream_bytes, h.stream_bytes);
                for (size_t i = from; i < n_buckets && i < from + 1 + below(16); ++i) put<uint64_t>(input, index + 8 * i, value);
                break;
            }
            case 3: {  // a record's n_followers
                const std::vector<RecordAt> records = records_of(input.data() + h0, l, 256);
                if (records.empty()) break;
                const RecordAt r = records[below(records.size())];
                const uint64_t room = (h.stream_bytes - r.at - k_head) / sizeof(Follower);
                put<uint32_t>(input, stream + r.at + 16,
                              static_cast<uint32_t>(chance(2) ? room + below(3) - 1 : interesting(r.n, room)));
                break;
            }
            case 4: {  // a record's key: a token changed, a slot emptied or filled, another's key
                const std::vector<RecordAt> records = records_of(input.data() + h0, l, 256);
                if (records.empty()) break;
                const RecordAt r = records[below(records.size())];
                if (chance(3)) {
                    const RecordAt other = records[below(records.size())];
                    std::memcpy(input.data() + stream + r.at, input.data() + stream + other.at, 16);
                } else {
                    const size_t slot = stream + r.at + 4 * below(4);
                    const uint32_t old = get<uint32_t>(input, slot);
                    put<uint32_t>(input, slot, chance(2) ? lookup::k_no_token : static_cast<uint32_t>(interesting(old, h.n_vocab)));
                }
                break;
            }
            case 5: {  // a follower's token or count, or two followers out of order
                const std::vector<RecordAt> records = records_of(input.data() + h0, l, 256);
                if (records.empty()) break;
                const RecordAt r = records[below(records.size())];
                if (r.n == 0) break;
                const size_t f = stream + r.at + k_head + sizeof(Follower) * below(r.n);
                if (chance(3) && r.n >= 2) {
                    const size_t g = stream + r.at + k_head + sizeof(Follower) * below(r.n);
                    for (size_t k = 0; k < sizeof(Follower); ++k) std::swap(input[f + k], input[g + k]);
                } else if (chance(2)) {
                    static const int64_t tokens[] = {-1, 0, INT32_MAX, INT32_MIN};
                    const int64_t t = chance(2) ? tokens[below(std::size(tokens))]
                                                : static_cast<int64_t>(h.n_vocab) - static_cast<int64_t>(below(2));
                    put<int32_t>(input, f, static_cast<int32_t>(t));
                } else {
                    static const uint32_t counts[] = {0, 1, 0x7FFFFFFFu, 0xFFFFFFFFu};
                    put<uint32_t>(input, f + 4, counts[below(std::size(counts))]);
                }
                break;
            }
            case 6: {  // two records swapped, whatever their sizes: keys in the wrong bucket or order
                const std::vector<RecordAt> records = records_of(input.data() + h0, l, 256);
                if (records.size() < 2) break;
                RecordAt a = records[below(records.size())], b = records[below(records.size())];
                if (a.at == b.at) break;
                if (a.at > b.at) std::swap(a, b);
                if (a.at + a.bytes() > b.at) break;
                const auto begin = input.begin() + static_cast<long>(stream);
                Bytes swapped(begin + static_cast<long>(b.at), begin + static_cast<long>(b.at + b.bytes()));
                swapped.insert(swapped.end(), begin + static_cast<long>(a.at + a.bytes()), begin + static_cast<long>(b.at));
                swapped.insert(swapped.end(), begin + static_cast<long>(a.at), begin + static_cast<long>(a.at + a.bytes()));
                std::copy(swapped.begin(), swapped.end(), begin + static_cast<long>(a.at));
                break;
            }
            case 7: {  // the index rebuilt for other bucket bits: records now in buckets they do not hash to
                const uint32_t bits = static_cast<uint32_t>(lookup::k_folder_table_min_bits + below(11));
                const size_t entries = (size_t{1} << bits) + 1;
                if (index + 8 * entries > max_size) break;
                const std::vector<RecordAt> records = records_of(input.data() + h0, l, 1024);
                std::vector<uint64_t> offsets(entries, 0);
                const unsigned how = static_cast<unsigned>(below(3));
                for (size_t i = 0; i < entries; ++i) {
                    if (how == 0) {  // everything in the last bucket
                        offsets[i] = i + 1 == entries ? h.stream_bytes : 0;
                    } else if (how == 1) {  // everything in the first bucket
                        offsets[i] = i == 0 ? 0 : h.stream_bytes;
                    } else {  // ascending record starts
                        offsets[i] = records.empty() || i + 1 == entries ? h.stream_bytes : records[below(records.size())].at;
                    }
                }
                if (how == 2) std::sort(offsets.begin(), offsets.end());
                input.resize(index);
                for (uint64_t o : offsets) input.insert(input.end(), reinterpret_cast<uint8_t*>(&o), reinterpret_cast<uint8_t*>(&o) + 8);
                set_layout(input, h, h.stream_bytes, bits);
                break;
            }
            case 8: {  // the stream grown at its end: zeros, noise or a copy of a record
                Bytes more;
                const std::vector<RecordAt> records = records_of(input.data() + h0, l, 256);
                if (!records.empty() && chance(2)) {
                    const RecordAt r = records[below(records.size())];
                    more.assign(input.begin() + static_cast<long>(stream + r.at),
                                input.begin() + static_cast<long>(stream + r.at + r.bytes()));
                } else {
                    more.resize(8 * (1 + below(8)));
                    if (chance(2)) {
                        for (uint8_t& byte : more) byte = static_cast<uint8_t>(m_rng());
                    }
                }
                more.resize((more.size() + 7) / 8 * 8, 0);
                if (input.size() + more.size() > max_size) break;
                // Buckets that ended at the old end may take the new bytes in, so they are read.
                const bool reach = chance(2);
                input.insert(input.begin() + static_cast<long>(index), more.begin(), more.end());
                const uint64_t grown = h.stream_bytes + more.size();
                for (size_t i = 0; reach && i < n_buckets; ++i) {
                    const size_t at = index + more.size() + 8 * i;
                    if (get<uint64_t>(input, at) == h.stream_bytes) put<uint64_t>(input, at, grown);
                }
                set_layout(input, h, grown, h.bucket_bits);
                break;
            }
            case 9: {  // the stream cut short, the index kept: buckets past its end, records across it
                const uint64_t cut = 8 * below(h.stream_bytes / 8 + 1);
                input.erase(input.begin() + static_cast<long>(stream + cut), input.begin() + static_cast<long>(index));
                set_layout(input, h, cut, h.bucket_bits);
                break;
            }
            default:  // truncated or grown, the header left as it was
                if (chance(2)) {
                    input.resize(h0 + below(file_size));
                } else if (input.size() + 64 <= max_size) {
                    input.insert(input.end(), 8 * (1 + below(8)), 0);
                }
        }
    }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    run_one(data, size);
    return 0;
}

#ifdef LOOKUP_LIBFUZZER
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
    return fuzz::custom_mutate<Mutator>(data, size, max_size, seed, seeds().inputs);
}

// The seed check runs once, before the first input, rather than inside the first one's time.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
    (void)seeds();
    return 0;
}
#else
int main(int argc, char** argv) {
    const fuzz::Options options(argc, argv);
    if (!options.files.empty()) return fuzz::replay(options.files, run_one);
    const Seeds& s = seeds();
    const fuzz::Totals totals = fuzz::mutate_seeds<Mutator>(s.inputs, options, run_one, "a built table does not verify");
    fuzz::print_summary(totals,
                        std::to_string(s.inputs.size()) + " seed tables match NgramCache (" +
                            std::to_string(s.keys_checked) + " look-ups); ",
                        ", " + std::to_string(g_tally.found) + " look-ups found followers, " +
                            std::to_string(g_tally.drafted) + " tokens drafted");
    return 0;
}
#endif
