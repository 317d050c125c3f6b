// Implementation of formats/text_tables.hpp.
#include "formats/text_tables.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/parallel.hpp"
#include "formats/text_input.hpp"

namespace sluice {
namespace {

// Parses a text file block by block, pieces in parallel; parse_piece(piece, out) appends the
// values of one piece to `out`; the pieces' outputs are appended in file order.
// `prepare(block, first_line)` runs serially before each block is parsed.
template <typename T, typename PieceFn, typename PrepareFn>
std::vector<T> parse_file(LineBlockReader& reader, PieceFn&& parse_piece, PrepareFn&& prepare) {
  std::vector<T> values;
  const int threads = omp_get_max_threads();
  std::string_view block;
  std::int64_t first_line = 0;
  Progress progress("read " + reader.path(), reader.input().size_on_disk());
  while (reader.next(block, first_line)) {
    prepare(block, first_line);
    const auto pieces = split_lines(block, first_line, threads);
    std::vector<std::vector<T>> outputs(pieces.size());
    parallel_pieces(pieces, [&](std::size_t i, const LinePiece& piece) {
      outputs[i].reserve(piece.text.size() / 4);
      parse_piece(piece, outputs[i]);
    });
    std::size_t total = values.size();
    for (const auto& out : outputs) total += out.size();
    if (total > values.capacity()) values.reserve(std::max(total, values.capacity() * 3 / 2));
    for (auto& out : outputs) {
      values.insert(values.end(), out.begin(), out.end());
      std::vector<T>().swap(out);
    }
    progress.set(reader.input().position_on_disk());
  }
  return values;
}

template <typename T, typename PieceFn>
std::vector<T> parse_file(LineBlockReader& reader, PieceFn&& parse_piece) {
  return parse_file<T>(reader, parse_piece, [](std::string_view, std::int64_t) {});
}

[[noreturn]] void non_numeric(const std::string& path, std::int64_t line, std::int64_t column,
                              std::string_view token, const char* expected) {
  if (token.empty())
    throw InputError(
        cat(at_line(path, line), "column ", column, ": empty field (expected ", expected, ")"));
  throw InputError(cat(at_line(path, line), "column ", column, ": non-numeric token '", token,
                       "' (expected ", expected, ")"));
}

}  // namespace

namespace {
template <typename Id>
std::vector<Id> parse_edges(const std::string& path, std::int64_t id_limit, ExtraColumns extra,
                            std::int64_t& max_id) {
  LineBlockReader reader(path);
  std::vector<Id> pairs = parse_file<Id>(reader, [&](const LinePiece& piece, auto& out) {
    LineCursor cursor(piece);
    std::string_view line, token;
    while (cursor.next(line)) {
      Tokens tokens(line);
      for (int column = 0; column < 2; ++column) {
        SLUICE_INPUT_CHECK(tokens.next(token), at_line(path, cursor.line_number()),
                           "missing column: expected \"src dst\", got '", line, "'");
        std::int64_t id = 0;
        if (!parse_int64(token, id))
          non_numeric(path, cursor.line_number(), column + 1, token, "a vertex id");
        SLUICE_INPUT_CHECK(id >= 0, at_line(path, cursor.line_number()), "negative vertex id ", id);
        SLUICE_INPUT_CHECK(id_limit <= 0 || id < id_limit, at_line(path, cursor.line_number()),
                           "vertex id ", id, " out of range [0, ", id_limit, ")");
        out.push_back(static_cast<Id>(id));
      }
      if (extra == ExtraColumns::kReject) {
        std::int64_t columns = 2;
        while (tokens.next(token)) ++columns;
        SLUICE_INPUT_CHECK(columns == 2, at_line(path, cursor.line_number()), columns,
                           " columns, expected exactly 2 (\"src,dst\"): '", line, "'");
      }
    }
  });
  std::int64_t largest = -1;
  const auto count = static_cast<std::int64_t>(pairs.size());
#pragma omp parallel for reduction(max : largest) if (worth_parallel(count))
  for (std::int64_t i = 0; i < count; ++i) largest = std::max<std::int64_t>(largest, pairs[i]);
  max_id = largest;
  return pairs;
}
}  // namespace

TextEdges read_text_edges(const std::string& path, std::int64_t id_limit, ExtraColumns extra) {
  TextEdges edges;
  if (id_limit > 0 && id_limit <= kMaxVertices)
    edges.narrow = parse_edges<vertex_t>(path, id_limit, extra, edges.max_id);
  else
    edges.wide = parse_edges<std::int64_t>(path, id_limit, extra, edges.max_id);
  return edges;
}

std::vector<float> read_feature_table(const std::string& path, std::int64_t expected_rows,
                                      std::int64_t& width) {
  LineBlockReader reader(path);
  width = -1;
  std::int64_t width_line = 0;
  auto values = parse_file<float>(
      reader,
      [&](const LinePiece& piece, auto& out) {
        LineCursor cursor(piece);
        std::string_view line, token;
        while (cursor.next(line)) {
          Tokens tokens(line);
          std::int64_t columns = 0;
          while (tokens.next(token)) {
            float value = 0;
            if (!parse_float(token, value))
              non_numeric(path, cursor.line_number(), columns + 1, token, "a number");
            SLUICE_INPUT_CHECK(std::isfinite(value), at_line(path, cursor.line_number()),
                               "feature value '", token, "' in column ", columns + 1,
                               " is not finite");
            out.push_back(value);
            ++columns;
          }
          SLUICE_INPUT_CHECK(columns == width, at_line(path, cursor.line_number()),
                             "feature row has ", columns, " columns, expected ", width,
                             " (the width of line ", width_line, ")");
        }
      },
      [&](std::string_view block, std::int64_t first_line) {
        // The first data line of the file fixes the width for every later row.
        if (width >= 0) return;
        LineCursor cursor(LinePiece{block, first_line});
        std::string_view line, token;
        if (!cursor.next(line)) return;
        Tokens tokens(line);
        width = 0;
        while (tokens.next(token)) ++width;
        width_line = cursor.line_number();
      });
  SLUICE_INPUT_CHECK(width > 0, path, ": no feature rows");
  const auto rows = static_cast<std::int64_t>(values.size()) / width;
  SLUICE_INPUT_CHECK(rows == expected_rows, path, ": ", rows, " feature rows, expected ",
                     expected_rows, " (one per vertex)");
  return values;
}

std::vector<std::int32_t> read_label_column(const std::string& path, std::int64_t expected_rows,
                                            std::int32_t declared_classes) {
  LineBlockReader reader(path);
  auto labels = parse_file<std::int32_t>(reader, [&](const LinePiece& piece, auto& out) {
    LineCursor cursor(piece);
    std::string_view line, token;
    while (cursor.next(line)) {
      Tokens tokens(line);
      tokens.next(token);
      const std::string where = at_line(path, cursor.line_number());
      std::string_view extra;
      SLUICE_INPUT_CHECK(!tokens.next(extra), where,
                         "more than one label column (multi-label data is not supported)");
      if (token == "nan" || token == "NaN" || token == "NAN") {
        out.push_back(-1);
        continue;
      }
      std::int64_t label = 0;
      if (!parse_int64(token, label)) {
        double real = 0;
        if (!parse_double(token, real))
          non_numeric(path, cursor.line_number(), 1, token, "a label");
        SLUICE_INPUT_CHECK(std::isfinite(real) && real == std::floor(real), where,
                           "non-integer label '", token, "'");
        SLUICE_INPUT_CHECK(std::fabs(real) < 2e9, where, "label '", token, "' out of range");
        label = static_cast<std::int64_t>(real);
      }
      SLUICE_INPUT_CHECK(label >= -1, where, "negative label ", label,
                         " (use nan or -1 for unlabeled)");
      SLUICE_INPUT_CHECK(declared_classes <= 0 || label < declared_classes, where, "label ", label,
                         " >= the declared number of classes ", declared_classes);
      SLUICE_INPUT_CHECK(label < (std::int64_t(1) << 30), where, "label ", label, " out of range");
      out.push_back(static_cast<std::int32_t>(label));
    }
  });
  SLUICE_INPUT_CHECK(static_cast<std::int64_t>(labels.size()) == expected_rows, path, ": ",
                     labels.size(), " label rows, expected ", expected_rows, " (one per vertex)");
  return labels;
}

std::vector<vertex_t> read_index_list(const std::string& path, std::int64_t n) {
  LineBlockReader reader(path);
  using Entry = std::pair<std::int64_t, std::int64_t>;  // id, line
  auto entries = parse_file<Entry>(reader, [&](const LinePiece& piece, auto& out) {
    LineCursor cursor(piece);
    std::string_view line, token;
    while (cursor.next(line)) {
      Tokens tokens(line);
      tokens.next(token);
      std::int64_t id = 0;
      if (!parse_int64(token, id)) non_numeric(path, cursor.line_number(), 1, token, "a vertex id");
      std::string_view extra;
      SLUICE_INPUT_CHECK(!tokens.next(extra), at_line(path, cursor.line_number()),
                         "more than one column (expected one vertex id per line)");
      SLUICE_INPUT_CHECK(id >= 0 && id < n, at_line(path, cursor.line_number()), "index ", id,
                         " out of range [0, ", n, ")");
      out.emplace_back(id, cursor.line_number());
    }
  });
  std::sort(entries.begin(), entries.end());
  std::vector<vertex_t> ids(entries.size());
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (i > 0 && entries[i].first == entries[i - 1].first) {
      const auto later = std::max(entries[i].second, entries[i - 1].second);
      const auto earlier = std::min(entries[i].second, entries[i - 1].second);
      throw InputError(cat(at_line(path, later), "index ", entries[i].first,
                           " duplicated (also on line ", earlier, ")"));
    }
    ids[i] = static_cast<vertex_t>(entries[i].first);
  }
  return ids;
}

std::vector<std::int64_t> read_count_list(const std::string& path) {
  LineBlockReader reader(path);
  return parse_file<std::int64_t>(reader, [&](const LinePiece& piece, auto& out) {
    LineCursor cursor(piece);
    std::string_view line, token;
    while (cursor.next(line)) {
      Tokens tokens(line);
      tokens.next(token);
      std::int64_t value = 0;
      if (!parse_int64(token, value)) non_numeric(path, cursor.line_number(), 1, token, "a count");
      std::string_view extra;
      SLUICE_INPUT_CHECK(!tokens.next(extra), at_line(path, cursor.line_number()),
                         "more than one column (expected one count per line)");
      SLUICE_INPUT_CHECK(value >= 0, at_line(path, cursor.line_number()), "negative count ", value);
      out.push_back(value);
    }
  });
}

}  // namespace sluice
