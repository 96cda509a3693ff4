"""Lexical scanner and brace structure (archaudit.parsing.cpp)."""
from __future__ import annotations

from archaudit.parsing import cpp

SRC = r'''// line comment with "quote" and { brace
/* block { comment
   spans */ int x = 1'000'000;
const char* s = "a { \" } b";
const char* r = R"delim(raw " { )delim";
char c = '{';
#define LONG_MACRO(a) \
  do { a; } while (0)
#if defined(__CUDA_ARCH__) && \
    __CUDA_ARCH__ >= 900
template <int N, typename T = float>
__global__ void __launch_bounds__(128) kern(T* p) {
  asm volatile("wgmma.fence.sync.aligned;");
}
#endif
struct __align__(16) Foo : Bar<(2 > 1)> {
  Foo(int a) : a_(a), b_{a} { }
  __device__ void m() { }
  int a_, b_;
};
using Alias = Foo;
namespace ns { inline int helper(int v) { return v; } }
'''


def test_scan_blanks_comments_and_literals_keeping_offsets():
    sc = cpp.scan(SRC)
    assert len(sc.code) == len(SRC) and len(sc.body) == len(SRC)
    assert "{" not in sc.code.splitlines()[0]  # comment blanked
    assert sc.code.count("\n") == SRC.count("\n")
    # string contents blanked, quotes kept; raw string blanked as a whole
    line4 = sc.code.splitlines()[3]
    assert '"' in line4 and "{" not in line4
    assert "{" not in sc.code.splitlines()[4] and "{" not in sc.code.splitlines()[5]
    lits = [cpp.string_value(sc.text[s:e]) for s, e in sc.strings]
    assert 'a { " } b' in lits and 'raw " { ' in lits and "wgmma.fence.sync.aligned;" in lits


def test_directives_join_continuations():
    sc = cpp.scan(SRC)
    d = {x.name: x for x in sc.directives}
    assert d["if"].line == 9
    # line splicing deletes backslash-newline (C translation phase 2): no space is put there
    assert d["if"].text == "defined(__CUDA_ARCH__) &&     __CUDA_ARCH__ >= 900"
    assert d["define"].text.startswith("LONG_MACRO(a)")
    assert "do { a; } while (0)" in d["define"].text
    # the continuation line of the #define is not a directive of its own
    assert [x.name for x in sc.directives] == ["define", "if", "endif"]


def test_structure_owners_and_kernels():
    sc = cpp.scan(SRC)
    st = cpp.structure(sc)
    top = {(st.owners[i].name, st.owners[i].kind) for _, _, i in st.top}
    assert ("kern", "func") in top and ("Foo", "class") in top and ("Alias", "alias") in top
    assert ("helper", "func") in top  # inside a namespace: still top level
    k = next(o for o in st.owners if o.name == "kern")
    assert k.kernel and k.template and k.line == 11
    assert sc.line_of(k.end - 1) == 14
    m = next(o for o in st.owners if o.name == "m")
    assert m.device_only and st.owners[m.parent].name == "Foo"


def test_braces_split_across_if_branches():
    src = """
#if A
void f(int a) {
#else
void f() {
#endif
  int x = 0;
}
void g() { }
"""
    st = cpp.structure(cpp.scan(src))
    names = [st.owners[i].name for _, _, i in st.top]
    assert names == ["f", "g"]


def test_tree_sitter_kernel_extents_agree_with_lexical():
    src = b"template <int N>\n__global__ void k1(int* p) {\n  p[0] = N;\n}\n__global__ void k2() { }\n"
    ts = cpp.kernel_extents_ts(src)
    st = cpp.structure(cpp.scan(src))
    lex = sorted((o.name, o.body_start, o.end) for o in st.owners if o.kernel)
    assert [(n, s, e) for n, s, e in ts] == lex


def test_enclosing_function_name():
    src = b"namespace a {\nvoid Runner::run(int x) {\n  int y = x;\n}\n}\n"
    tree = cpp.parse(src)
    assert cpp.enclosing_function_name(tree, src.index(b"int y"), src) == "Runner::run"
