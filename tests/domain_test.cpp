// Declared domains (numerics/domain.hpp, properties/domain.hpp): parsing
// names the bad key, projection keeps every generated case inside, and a
// kernel that refuses inputs outside its domain passes the suite only when
// it declares it.
#include <gtest/gtest.h>

#include <stdexcept>

#include "impls/registry.hpp"
#include "numerics/domain.hpp"
#include "properties/domain.hpp"
#include "properties/suite.hpp"

namespace domain_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;

namespace {

std::string parse_error(const std::string& json, const std::string& op) {
    try {
        parse_domain(json, op);
    } catch (const std::invalid_argument& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST(Domain, ParseErrorsNameTheKey) {
    EXPECT_NE(parse_error(R"({"head_size":[64]})", "attention").find("\"head_size\": not a dimension or parameter"), std::string::npos);
    EXPECT_NE(parse_error(R"({"rows":[]})", "rms_norm").find("\"rows\": an empty list"), std::string::npos);
    EXPECT_NE(parse_error(R"({"rows":{"min":8,"max":4}})", "rms_norm").find("min > max"), std::string::npos);
    EXPECT_NE(parse_error(R"({"rows":{"multiple_of":2.5}})", "rms_norm").find("positive integer"), std::string::npos);
    EXPECT_NE(parse_error(R"({"cols":[0]})", "silu").find("positive integers"), std::string::npos);
    EXPECT_NE(parse_error(R"({"rows":{"min":0}})", "silu").find("min must be >= 1"), std::string::npos);
    EXPECT_NE(parse_error(R"({"cols":{"step":2}})", "silu").find("unknown rule \"step\""), std::string::npos);
    EXPECT_NE(parse_error("[1]", "silu").find("not a JSON object"), std::string::npos);
    EXPECT_EQ(parse_error(R"({"head_dim":[64,128],"causal":[1]})", "attention"), "");
    EXPECT_EQ(parse_error(R"({"mask":[0]})", "attention"), "");
    EXPECT_NE(parse_error(R"({"mask":[2]})", "attention").find("\"mask\": a flag"), std::string::npos);
    EXPECT_THROW(parse_domain(R"({"scale":[1]})", "attention", true), std::invalid_argument);  // not a tunable
    EXPECT_NO_THROW(parse_domain(R"({"block":[16,64]})", "attention", true));
}

TEST(Domain, ProjectionRules) {
    const Domain d = parse_domain(R"({"head_dim":[128,64],"scale":[0.5,0.25]})", "attention");
    const DomainRule& list = d.rules.at("head_dim");  // sorted: 64, 128
    EXPECT_EQ(project(list, 64, true), 64);
    EXPECT_EQ(project(list, 3, true), 128);  // index 3 mod 2
    EXPECT_EQ(project(list, 4, true), 64);
    EXPECT_EQ(project(d.rules.at("scale"), 0.3, false), 0.25);  // parameters: the nearest entry
    EXPECT_EQ(d.text(), R"({"head_dim":[64,128],"scale":[0.25,0.5]})");
    const DomainRule range = parse_domain(R"({"rows":{"multiple_of":8,"max":36,"min":2}})", "rms_norm").rules.at("rows");
    EXPECT_EQ(project(range, 1, true), 8);
    EXPECT_EQ(project(range, 9, true), 16);
    EXPECT_EQ(project(range, 100, true), 32);  // clamped to 36, then down to a multiple
    EXPECT_EQ(parse_domain("", "silu").text(), "");
}

TEST(Domain, ProjectedSpecsKeepTheOpsInvariants) {
    props::CaseSpec s;
    s.op = "attention";
    s.dims = {6, 3, 2, 5, 7, 4, 0};
    const Domain d = parse_domain(R"({"kv_heads":[4],"head_dim":[8,16]})", "attention");
    const props::CaseSpec p = props::project(s, d);
    EXPECT_EQ(p.dims[1], 4);
    EXPECT_EQ(p.dims[0] % p.dims[1], 0);
    EXPECT_TRUE(p.dims[4] == 8 || p.dims[4] == 16);
    s.dims[6] = 1;  // an additive mask: a domain of kernels that take none removes it
    EXPECT_EQ(props::project(s, parse_domain(R"({"mask":[0]})", "attention")).dims[6], 0);
    EXPECT_EQ(props::project(s, parse_domain(R"({"head_dim":[8]})", "attention")).dims[6], 1);
    props::CaseSpec r;
    r.op = "rms_norm";
    r.rows = 3, r.n = 5;
    const props::CaseSpec q = props::project(r, parse_domain(R"({"rows":{"multiple_of":2},"cols":[16]})", "rms_norm"));
    EXPECT_EQ(q.rows, 4);
    EXPECT_EQ(q.n, 16);
}

TEST(Domain, AKernelThatRefusesOtherShapesPassesOnlyInsideItsDeclaredDomain) {
    KernelInfo k = *builtin_registry().find("cpu.simd.rms_norm.fp32");
    const KernelFn inner = k.fn;
    k.fn = [inner](const KernelCall& c) {
        if (c.in[0].cols() % 4 != 0) throw std::invalid_argument("row length must be a multiple of 4");
        inner(c);
    };
    props::RunConfig cfg;
    cfg.cases = 20;
    cfg.shrink = false;
    cfg.infer_conventions = false;
    EXPECT_FALSE(props::run_suite(k, cfg).passed);
    k.domain = R"({"cols":{"multiple_of":4}})";
    const report::KernelReport r = props::run_suite(k, cfg);
    EXPECT_TRUE(r.passed);
    EXPECT_EQ(r.domain, R"({"cols":{"multiple_of":4}})");
}

}  // namespace domain_test
