// Report writers: JSON round trip and field-naming errors, Markdown content,
// JUnit structure and escaping, self-contained HTML, atomic file writes.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "reports/atomic_file.hpp"
#include "reports/writers.hpp"

namespace reports_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

namespace fs = std::filesystem;
using namespace conform::report;
using nlohmann::json;

namespace {

const std::string kNastyMessage = "got 0x1p+0 < want & \"x\" 'y'\nsecond line";
const std::string kCounterexample = "x = [0x1.8p+3, -0x0p+0]\n<tail>";
const std::string kReproduce = "RC_PARAMS=\"seed=42 reproduce=AbC<&>\"";

PropertyOutcome prop(std::string name, bool passed) {
    PropertyOutcome p;
    p.name = std::move(name);
    p.passed = passed;
    p.cases = 100;
    p.seconds = 0.5;
    return p;
}

KernelReport kernel(std::string name, std::string op, std::string family, std::string role, bool passed) {
    KernelReport k;
    k.kernel = std::move(name);
    k.op = std::move(op);
    k.family = std::move(family);
    k.role = std::move(role);
    k.variant = "v1";
    k.backend = "cpu";
    k.in_format = k.out_format = "bf16";
    k.acc_format = "fp32";
    k.budget = "<= 1 ulp";
    k.passed = passed;
    k.stats.elements = 12345;
    k.stats.max_ulp = passed ? 1 : 7;
    k.stats.ulp_hist = {12000, 300, 40, 5, passed ? 0 : 1, 0, 0, 0, 0, 0};
    k.seconds = 1.25;
    return k;
}

// A rope kernel with a passing worst case and an invariance curve whose last
// point exceeds its budget.
KernelReport rope_kernel() {
    KernelReport k = kernel("cpu.simd.rope.fp32", "rope", "rope", "kernel", false);
    PropertyOutcome p = prop("within_budget", true);
    p.worst_metric = "util";
    p.worst_value = 0.908;
    p.worst_case = "element 3: got 0x1p-2, want 0x1.0000002p-2";
    p.worst_reproduce = "reproduce=BAyY seed=7";
    Curve c{"rope_invariance", "position x", "error / budget", {{1, 1e-3, 1}, {1024, 0.5, 1}, {1048576, 3, 2}}, false, ""};
    k.curves = {c};
    k.properties = {p, prop("rope_invariance_curve", false)};
    return k;
}

RunReport sample() {
    RunReport r;
    r.tool_version = "0.1.0";
    r.started = "2024-05-01T10:00:00Z";
    r.finished = "2024-05-01T10:01:00Z";
    r.seed = 18446744073709551615ull;
    r.cases = 200;
    r.machine = "Test CPU @ 3GHz, avx2";
    r.selection = {{"op", "gelu,rmsnorm"}, {"dtype", "bf16"}};

    KernelReport norm = kernel("rmsnorm_f32_avx2", "rmsnorm", "norm", "kernel", true);
    norm.budget = "derived bound (docs/norm.md)";
    norm.stats.has_bound = true;
    norm.stats.max_util = 0.93;
    norm.stats.worst_util_case = "n=4096 x=[0x1p-3, ...]";
    norm.stats.util_quantiles = {0.1, 0.4, 0.7, 0.9, 0.93};
    norm.stats.util_hist = {5000, 3000, 2000, 1000, 500, 300, 100, 30, 10, 5, 0, 0};
    norm.properties = {prop("within_budget", true), prop("scale_invariance", true)};

    KernelReport bad = kernel("gelu_bf16_bad", "gelu", "activation", "kernel", false);
    PropertyOutcome fail = prop("within_budget", false);
    fail.message = kNastyMessage;
    fail.counterexample = kCounterexample;
    fail.reproduce = kReproduce;
    bad.stats.worst_ulp_case = "x=0x1.8p+3 -> got 0x1p+0, want 0x1.2p+0";
    bad.properties = {fail, prop("monotone", true)};

    KernelReport base = kernel("gelu_naive", "gelu", "activation", "baseline", false);
    base.budget = "ref | naive";
    PropertyOutcome bfail = prop("within_budget", false);
    bfail.message = "baseline error 3 ulp";
    base.properties = {bfail};
    r.kernels = {norm, bad, base};

    ExhaustiveResult ex;
    ex.kernel = "gelu_bf16_bad";
    ex.op = "gelu";
    ex.format = "bf16";
    ex.inputs = 65536;
    ex.max_ulp = 1;
    ex.budget_ulp = 1;
    ex.worst_input = "0x1.8p+3";
    ex.passed = true;
    r.exhaustive = {ex};

    MutantResult killed{"rmsnorm_mut_no_eps", "rmsnorm", "missing epsilon", "drops eps & divides by <0>", true,
                        "within_budget"};
    MutantResult survived{"gelu_mut_tanh_approx", "gelu", "approximation", "uses \"fast\" tanh", false, ""};
    r.mutants = {killed, survived};
    return r;
}

// sample() plus a rope kernel: the attention section's input.
RunReport with_rope() {
    RunReport r = sample();
    r.kernels.push_back(rope_kernel());
    return r;
}

std::size_t count(const std::string& hay, const std::string& needle) {
    std::size_t n = 0;
    for (auto pos = hay.find(needle); pos != std::string::npos; pos = hay.find(needle, pos + 1)) ++n;
    return n;
}

std::string error_of(const json& j) {
    try {
        from_json(j);
    } catch (const std::runtime_error& e) {
        return e.what();
    }
    return "";
}

// A small XML well-formedness check: tags balance, attribute values hold no
// raw '<' or newline, every '&' starts an entity.  Returns "" when fine.
std::string xml_problem(const std::string& x) {
    std::vector<std::string> open;
    for (std::size_t i = 0; i < x.size(); ++i) {
        if (x[i] == '&') {
            std::size_t semi = x.find(';', i);
            std::string ent = x.substr(i + 1, semi == std::string::npos ? 0 : semi - i - 1);
            static const std::set<std::string> named = {"amp", "lt", "gt", "quot", "apos"};
            bool ok = named.count(ent) || (ent.size() > 1 && ent[0] == '#' &&
                                           ent.find_first_not_of("0123456789", 1) == std::string::npos);
            if (!ok) return "bad entity at " + std::to_string(i);
            continue;
        }
        if (x[i] == '>') return "raw '>' in text at " + std::to_string(i);
        if (x[i] != '<') continue;
        if (x.compare(i, 5, "<?xml") == 0) {
            i = x.find("?>", i) + 1;
            continue;
        }
        bool closing = x[i + 1] == '/';
        std::size_t name_start = i + (closing ? 2 : 1);
        std::size_t name_end = x.find_first_of(" />", name_start);
        std::string name = x.substr(name_start, name_end - name_start);
        if (name.empty() || !std::isalpha(static_cast<unsigned char>(name[0]))) return "bad tag at " + std::to_string(i);
        bool in_value = false;
        std::size_t j = name_end;
        for (; j < x.size() && (in_value || x[j] != '>'); ++j) {
            if (x[j] == '"') in_value = !in_value;
            else if (in_value && (x[j] == '<' || x[j] == '\n')) return "raw '<' or newline in attribute of " + name;
            else if (!in_value && x[j] == '<') return "unterminated tag " + name;
        }
        bool self_closing = x[j - 1] == '/';
        if (closing) {
            if (open.empty() || open.back() != name) return "mismatched </" + name + ">";
            open.pop_back();
        } else if (!self_closing) {
            open.push_back(name);
        }
        i = j;
    }
    return open.empty() ? "" : "unclosed <" + open.back() + ">";
}

std::string slice(const std::string& s, const std::string& from, const std::string& to) {
    auto a = s.find(from);
    if (a == std::string::npos) return "";
    auto b = s.find(to, a);
    return s.substr(a, b == std::string::npos ? std::string::npos : b - a);
}

fs::path fresh_dir() {
    std::string tmpl = (fs::temp_directory_path() / "conform-reports-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    return tmpl;
}

std::set<std::string> listing(const fs::path& dir) {
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
    return names;
}

std::string slurp(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace

// ---- JSON ------------------------------------------------------------------

TEST(ReportsJson, RoundTripsToEqualJson) {
    json j = to_json(sample());
    EXPECT_EQ(to_json(from_json(j)), j);
    EXPECT_EQ(to_json(from_json(json::parse(to_json_text(sample())))), j);
    EXPECT_EQ(j["schema"], "conform.report/1");
    EXPECT_EQ(j["seed"].get<std::uint64_t>(), 18446744073709551615ull);
}

TEST(ReportsJson, FieldsAddedLaterAreOptional) {
    json j = to_json(with_rope());
    for (auto& k : j["kernels"]) {
        k.erase("curves");
        for (auto& p : k["properties"])
            for (const char* f : {"worst_metric", "worst_value", "worst_case", "worst_reproduce"}) p.erase(f);
    }
    RunReport r;
    ASSERT_NO_THROW(r = from_json(j));
    EXPECT_TRUE(r.kernels[3].curves.empty());
    EXPECT_EQ(r.kernels[3].properties[0].worst_reproduce, "");
    const RunReport full = from_json(to_json(with_rope()));
    ASSERT_EQ(full.kernels[3].curves.size(), 1u);
    EXPECT_EQ(full.kernels[3].curves[0].points[2].x, 1048576);
    EXPECT_EQ(full.kernels[3].properties[0].worst_reproduce, "reproduce=BAyY seed=7");
}

TEST(ReportsJson, SummaryCountsGatedKernelsOnly) {
    json s = to_json(sample())["summary"];
    EXPECT_EQ(s["kernels_checked"], 2);
    EXPECT_EQ(s["kernels_failed"], 1);
    EXPECT_EQ(s["baselines"], 1);
    EXPECT_EQ(s["mutants_killed"], 1);
    EXPECT_EQ(s["mutants_total"], 2);
    EXPECT_EQ(s["exhaustive_passed"], 1);
    EXPECT_EQ(s["exhaustive_total"], 1);
    EXPECT_EQ(s["passed"], false);
    EXPECT_EQ(s["complete"], true);
}

TEST(ReportsJson, NonFiniteNumbersRoundTrip) {
    RunReport r = sample();
    r.kernels[0].stats.max_util = std::numeric_limits<double>::infinity();
    r.kernels[0].stats.util_quantiles[4] = std::numeric_limits<double>::quiet_NaN();
    RunReport back = from_json(json::parse(to_json_text(r)));
    EXPECT_TRUE(std::isinf(back.kernels[0].stats.max_util));
    EXPECT_TRUE(std::isnan(back.kernels[0].stats.util_quantiles[4]));
}

TEST(ReportsJson, ErrorsNameTheField) {
    json j = to_json(sample());
    json missing = j;
    missing["kernels"][1]["stats"].erase("max_ulp");
    EXPECT_EQ(error_of(missing), "kernels[1].stats.max_ulp: missing");

    json negative = j;
    negative["kernels"][1]["stats"]["max_ulp"] = -3;
    EXPECT_EQ(error_of(negative), "kernels[1].stats.max_ulp: expected unsigned integer");

    json wrong_bool = j;
    wrong_bool["kernels"][0]["properties"][1]["passed"] = 1;
    EXPECT_EQ(error_of(wrong_bool), "kernels[0].properties[1].passed: expected boolean");

    json wrong_hist = j;
    wrong_hist["kernels"][0]["stats"]["util_hist"][3] = "many";
    EXPECT_EQ(error_of(wrong_hist), "kernels[0].stats.util_hist[3]: expected integer");

    json wrong_mutant = j;
    wrong_mutant["mutants"][1]["killed_by"] = nullptr;
    EXPECT_EQ(error_of(wrong_mutant), "mutants[1].killed_by: expected string");

    json wrong_cases = j;
    wrong_cases["cases"] = 1e12;
    EXPECT_EQ(error_of(wrong_cases), "cases: expected integer");

    json future = j;
    future["schema"] = "conform.report/2";
    EXPECT_NE(error_of(future).find("schema: unsupported schema 'conform.report/2'"), std::string::npos);

    EXPECT_EQ(error_of(json::array()), "(root): expected object");
    EXPECT_EQ(error_of(j), "");
}

RC_GTEST_PROP(ReportsJson, ArbitraryTextRoundTrips, (const std::string& name, const std::string& message)) {
    RunReport r = sample();
    r.kernels[1].kernel = name;
    r.kernels[1].properties[0].message = message;
    r.selection[name] = message;
    json j = to_json(r);
    RC_ASSERT(to_json(from_json(j)) == j);
}

// ---- Markdown --------------------------------------------------------------

TEST(ReportsMarkdown, ShowsFailuresReproductionAndKillRate) {
    std::string md = to_markdown(sample());
    EXPECT_NE(md.find("gelu_bf16_bad"), std::string::npos);
    EXPECT_NE(md.find(kReproduce), std::string::npos);
    EXPECT_NE(md.find("```text\nx = [0x1.8p+3, -0x0p+0]\n<tail>\n```"), std::string::npos);
    EXPECT_NE(md.find("kill rate: 1/2"), std::string::npos);
    EXPECT_NE(md.find("| gelu_mut_tanh_approx | gelu | approximation | uses \"fast\" tanh | SURVIVED |"),
              std::string::npos);
    EXPECT_NE(md.find("| gelu_bf16_bad | gelu | bf16 | 65536 | 1 | 1 | 0 | 0x1.8p+3 | PASS |"), std::string::npos);
    EXPECT_NE(md.find("| rmsnorm_f32_avx2 | kernel | bf16 -> bf16 (acc fp32) | derived bound (docs/norm.md) | PASS | 1 "
                      "| 0.93 | 0.7 |"),
              std::string::npos);
    EXPECT_NE(md.find("baseline (not gated)"), std::string::npos);
    EXPECT_NE(md.find("18446744073709551615"), std::string::npos);  // seed
    EXPECT_NE(md.find("FAILED"), std::string::npos);
    EXPECT_EQ(md.find("INTERRUPTED"), std::string::npos);
    // Only failing kernels get a failure section.
    std::string failures = slice(md, "## Failures", "## Exhaustive");
    EXPECT_NE(failures.find("gelu_bf16_bad"), std::string::npos);
    EXPECT_EQ(failures.find("rmsnorm_f32_avx2"), std::string::npos);
}

TEST(ReportsMarkdown, AttentionSectionHasStatsCurveAndWorstCases) {
    const std::string md = to_markdown(with_rope());
    EXPECT_EQ(to_markdown(sample()).find("## Attention"), std::string::npos);  // no attention kernels, no section
    const std::string att = slice(md, "## Attention", "## Exhaustive");
    ASSERT_FALSE(att.empty());
    EXPECT_EQ(att.find("rmsnorm_f32_avx2"), std::string::npos);  // norms are not in it
    EXPECT_NE(att.find("| cpu.simd.rope.fp32 | FAIL | 12345 | 7 | - | - | - | - |"), std::string::npos);
    EXPECT_NE(att.find("| position x | cpu.simd.rope.fp32 |"), std::string::npos);
    EXPECT_NE(att.find("| 1048576 | 1.5 |"), std::string::npos);  // 3 / 2
    EXPECT_NE(att.find("| cpu.simd.rope.fp32 | within_budget | PASS | 100 | util 0.908 | element 3: got 0x1p-2, "
                       "want 0x1.0000002p-2 | conform run --kernel cpu.simd.rope.fp32 --reproduce 'reproduce=BAyY "
                       "seed=7' |"),
              std::string::npos);
}

// sample() plus a sinkhorn kernel with its depth_amplification curve (and
// the unconstrained-HC peer series) and a sinkhorn mutant with one too.
RunReport with_amplification() {
    RunReport r = sample();
    KernelReport k = kernel("cpu.simd.sinkhorn.fp32", "sinkhorn", "sinkhorn", "kernel", true);
    k.curves = {Curve{"depth_amplification", "depth L", "||B_L ... B_1||_2",
                      {{1, 0.75, 1.0001, 1.2}, {1000, 1.0000001, 1.1, 2.5e7}}, true, "free HC"}};
    KernelReport m = k;
    m.kernel = "mutant.sinkhorn.rows_only.fp32", m.role = "mutant";
    r.kernels.push_back(k);
    r.kernels.push_back(m);
    return r;
}

TEST(ReportsMarkdown, AmplificationSectionShowsKernelsBudgetAndFreeHc) {
    EXPECT_EQ(to_markdown(sample()).find("## mHC residual path"), std::string::npos);
    const std::string md = to_markdown(with_amplification());
    const std::string amp = slice(md, "## mHC residual path over depth", "## Exhaustive");
    ASSERT_FALSE(amp.empty());
    EXPECT_NE(amp.find("| kernel | L = 1 | L = 1000 | budget at L max | verdict |"), std::string::npos);
    EXPECT_NE(amp.find("| cpu.simd.sinkhorn.fp32 | 0.75 | 1 | 1.1 | PASS |"), std::string::npos);
    EXPECT_NE(amp.find("| free HC | 1.2 | 2.5e+07 | - | not judged |"), std::string::npos);
    EXPECT_EQ(amp.find("mutant.sinkhorn"), std::string::npos);  // mutants are not in it
    const std::string html = to_html(with_amplification());
    EXPECT_NE(slice(html, "<section id=\"amplification\">", "</section>").find("2.5e+07"), std::string::npos);
    EXPECT_EQ(xml_problem(slice(html, "<section id=\"amplification\">", "</section>") + "</section>"), "");
    const RunReport back = from_json(to_json(with_amplification()));
    EXPECT_EQ(back.kernels[3].curves[0].peer_label, "free HC");
    EXPECT_EQ(back.kernels[3].curves[0].points[1].peer, 2.5e7);
    EXPECT_EQ(to_json(back), to_json(with_amplification()));
}

TEST(ReportsMarkdown, TableCellsAreEscaped) {
    std::string md = to_markdown(sample());
    std::istringstream lines(md);
    std::string line;
    int rows = 0;
    while (std::getline(lines, line)) {
        if (line.find("| gelu_naive |") != 0) continue;
        ++rows;
        std::size_t pipes = 0;
        for (std::size_t i = 0; i < line.size(); ++i) pipes += line[i] == '|' && (i == 0 || line[i - 1] != '\\');
        EXPECT_EQ(pipes, detail::kernel_columns().size() + 1) << line;  // one per column, the '|' in the budget escaped
    }
    EXPECT_EQ(rows, 1);
}

TEST(ReportsMarkdown, InterruptedRunIsMarked) {
    RunReport r = sample();
    r.complete = false;
    EXPECT_NE(to_markdown(r).find("INTERRUPTED"), std::string::npos);
}

// ---- JUnit -----------------------------------------------------------------

TEST(ReportsJunit, CountsTestcasesFailuresAndSkips) {
    std::string x = to_junit(sample());
    // 2 + 2 properties, 1 baseline property, 1 exhaustive sweep, 2 mutants.
    EXPECT_EQ(count(x, "<testcase "), 8u);
    EXPECT_EQ(count(x, "<failure "), 2u);  // gelu_bf16_bad.within_budget, surviving mutant
    EXPECT_EQ(count(x, "<skipped message=\"baseline, not gated\""), 1u);
    EXPECT_EQ(count(x, "<testsuite "), 2u);  // gelu, rmsnorm
    EXPECT_NE(x.find("<testsuites name=\"conform\" tests=\"8\" failures=\"2\" errors=\"0\" skipped=\"1\""),
              std::string::npos);
    EXPECT_NE(x.find("classname=\"gelu\" name=\"gelu_bf16_bad.within_budget\""), std::string::npos);
    EXPECT_NE(x.find("name=\"rmsnorm_mut_no_eps.killed\""), std::string::npos);
    EXPECT_NE(x.find("name=\"gelu_bf16_bad.exhaustive.bf16\""), std::string::npos);
}

TEST(ReportsJunit, IsEscapedAndWellFormed) {
    std::string x = to_junit(sample());
    EXPECT_EQ(xml_problem(x), "");
    EXPECT_NE(x.find("message=\"got 0x1p+0 &lt; want &amp; &quot;x&quot; &#39;y&#39;&#10;second line\""),
              std::string::npos);
    EXPECT_NE(x.find("&lt;tail&gt;"), std::string::npos);
    EXPECT_EQ(x.find("<tail>"), std::string::npos);
    // The checker itself must reject what it is meant to catch.
    EXPECT_NE(xml_problem("<a b=\"<\"/>"), "");
    EXPECT_NE(xml_problem("<a>x & y</a>"), "");
    EXPECT_NE(xml_problem("<a><b></a>"), "");
}

TEST(ReportsJunit, InterruptedRunFails) {
    RunReport r = sample();
    r.complete = false;
    std::string x = to_junit(r);
    EXPECT_NE(x.find("name=\"run.complete\""), std::string::npos);
    EXPECT_EQ(count(x, "<failure "), 3u);
    EXPECT_EQ(xml_problem(x), "");
}

TEST(ReportsEscape, ControlCharactersAndBadUtf8) {
    using detail::escape_markup;
    EXPECT_EQ(escape_markup("a\x01z"), "a\xEF\xBF\xBDz");
    EXPECT_EQ(escape_markup("a\xFFz"), "a\xEF\xBF\xBDz");
    EXPECT_EQ(escape_markup("\xC3\xA9"), "\xC3\xA9");  // valid UTF-8 kept
    EXPECT_EQ(escape_markup("a\nb\tc"), "a&#10;b&#9;c");
    EXPECT_EQ(escape_markup("a\nb", false), "a\nb");
}

RC_GTEST_PROP(ReportsEscape, OutputHasNoMarkupCharacters, (const std::string& s)) {
    std::string e = detail::escape_markup(s);
    for (char c : e) {
        RC_ASSERT(std::string_view("<>\"'").find(c) == std::string_view::npos);
        RC_ASSERT(static_cast<unsigned char>(c) >= 0x20);
    }
    RC_ASSERT(xml_problem("<a v=\"" + e + "\">" + e + "</a>") == "");
}

// ---- HTML ------------------------------------------------------------------

TEST(ReportsHtml, ChartsPerKernel) {
    std::string page = to_html(sample());
    std::string bound = slice(page, "<details id=\"k0\"", "</details>");
    std::string unbound = slice(page, "<details id=\"k1\"", "</details>");
    EXPECT_EQ(count(bound, "<svg"), 2u);
    EXPECT_EQ(count(unbound, "<svg"), 1u);
    EXPECT_NE(bound.find("util = 1"), std::string::npos);
    EXPECT_NE(bound.find(">[.9,1)<"), std::string::npos);
    EXPECT_NE(bound.find(">&gt;1024<"), std::string::npos);
    EXPECT_EQ(count(page, "<details "), 3u);
    EXPECT_NE(unbound.find(" open>"), std::string::npos);  // failing kernel expanded
    EXPECT_EQ(bound.find(" open>"), std::string::npos);
}

TEST(ReportsHtml, AttentionSectionPlotsTheCurve) {
    const std::string html = to_html(with_rope());
    const std::string att = slice(html, "<section id=\"attention\">", "</section>");
    ASSERT_FALSE(att.empty());
    EXPECT_EQ(count(att, "<polyline"), 1u);  // one kernel with a curve
    EXPECT_NE(att.find("2^20"), std::string::npos);
    EXPECT_NE(att.find("--reproduce &#39;reproduce=BAyY seed=7&#39;"), std::string::npos);
    EXPECT_EQ(xml_problem(att + "</section>"), "");
}

TEST(ReportsHtml, SelfContainedAndEscaped) {
    std::string page = to_html(sample());
    EXPECT_EQ(page.find("http"), std::string::npos);
    EXPECT_EQ(page.find("<script"), std::string::npos);
    EXPECT_EQ(page.find("src="), std::string::npos);
    EXPECT_EQ(page.find("url("), std::string::npos);
    EXPECT_EQ(page.find("<tail>"), std::string::npos);
    EXPECT_NE(page.find("&lt;tail&gt;"), std::string::npos);
    EXPECT_NE(page.find("RC_PARAMS=&quot;seed=42 reproduce=AbC&lt;&amp;&gt;&quot;"), std::string::npos);
    EXPECT_NE(page.find("drops eps &amp; divides by &lt;0&gt;"), std::string::npos);
    EXPECT_NE(page.find("kill rate: 1/2"), std::string::npos);
    EXPECT_NE(page.find("<tr class=\"fail\"><td><a href=\"#k1\">gelu_bf16_bad</a>"), std::string::npos);
}

// ---- files -----------------------------------------------------------------

TEST(ReportsFiles, WriteReportDirWritesFourFilesAndNoTemps) {
    fs::path dir = fresh_dir() / "nested" / "out";
    RunReport r = sample();
    write_report_dir(dir, r);
    write_report_dir(dir, r);  // replacing existing files
    EXPECT_EQ(listing(dir), (std::set<std::string>{"report.json", "report.md", "junit.xml", "report.html"}));
    EXPECT_EQ(to_json(from_json(json::parse(slurp(dir / "report.json")))), to_json(r));
    EXPECT_EQ(slurp(dir / "junit.xml"), to_junit(r));
    EXPECT_EQ(fs::status(dir / "report.md").permissions() & fs::perms::others_read, fs::perms::others_read);
    fs::remove_all(dir.parent_path().parent_path());
}

TEST(ReportsFiles, AtomicWriteReplacesContent) {
    fs::path dir = fresh_dir();
    write_file_atomic(dir / "a.txt", "first version, longer");
    write_file_atomic(dir / "a.txt", "second");
    EXPECT_EQ(slurp(dir / "a.txt"), "second");
    EXPECT_EQ(listing(dir), std::set<std::string>{"a.txt"});
    fs::remove_all(dir);
}

TEST(ReportsFiles, UnwritablePathThrowsNamingIt) {
    fs::path dir = fresh_dir();
    write_file_atomic(dir / "blocker", "a regular file");
    fs::path target = dir / "blocker" / "report.json";  // parent is not a directory, even for root
    try {
        write_file_atomic(target, "x");
        ADD_FAILURE() << "no exception";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find(target.string()), std::string::npos) << e.what();
    }
    try {
        write_report_dir(dir / "blocker" / "out", sample());
        ADD_FAILURE() << "no exception";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find((dir / "blocker" / "out").string()), std::string::npos) << e.what();
    }
    fs::remove_all(dir);
}

TEST(ReportsFiles, FailedRenameLeavesNoTempFile) {
    fs::path dir = fresh_dir();
    fs::create_directory(dir / "report.json");  // rename over a directory fails
    EXPECT_THROW(write_file_atomic(dir / "report.json", "x"), std::runtime_error);
    EXPECT_EQ(listing(dir), std::set<std::string>{"report.json"});
    EXPECT_TRUE(fs::is_directory(dir / "report.json"));
    fs::remove_all(dir);
}

}  // namespace reports_test
