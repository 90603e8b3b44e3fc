package safetext_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/wasmhost/wasmhost/internal/safetext"
)

func TestShow(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"csi.example.com", "csi.example.com"},
		{"", ""},
		{`C:\plugins\a.sock`, `C:\plugins\a.sock`}, // nothing to escape: backslashes kept
		{"café ☕ \uFFFD", "café ☕ \uFFFD"},         // a U+FFFD of its own is text
		{"\x1b[2Jcleared", `\x1b[2Jcleared`},
		{"\x1b]0;pwned\x07", `\x1b]0;pwned\x07`},
		{"over\rwritten\x08", `over\rwritten\x08`},
		{"two\nlines\tand a tab", `two\nlines\tand a tab`},
		{"del\x7f", `del\x7f`},
		{"abc\u202egnp.exe", `abc\u202egnp.exe`},
		{"mark\u200e\u061c\u2066", `mark\u200e\u061c\u2066`},
		{"c1 \u0085 \u009b", `c1 \u0085 \u009b`},
		{"bad \xff utf-8", `bad \xff utf-8`},
		{"\xc3", `\xc3`}, // a rune cut short
		{`back\slash` + "\x1b", `back\\slash\x1b`},
		{`looks escaped \x1b` + "\n", `looks escaped \\x1b\n`},
	} {
		if got := safetext.Show(c.in); got != c.want {
			t.Errorf("Show(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestUTF8(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"plain", "plain"},
		{"kept\x1b[31m\n", "kept\x1b[31m\n"}, // valid UTF-8: exact; Show escapes it for display
		{`a\b`, `a\b`},
		{"sock\xff\xfe" + `\`, `sock\xff\xfe\\`},
		{"x\xff\x1b", `x\xff\x1b`},
	} {
		if got := safetext.UTF8(c.in); got != c.want {
			t.Errorf("UTF8(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	in := []string{"a", "b"}
	if got := safetext.UTF8All(in); &got[0] != &in[0] {
		t.Error("UTF8All copied a list with nothing to escape")
	}
	if got := safetext.UTF8All([]string{"a", "\xff"}); got[0] != "a" || got[1] != `\xff` {
		t.Errorf("UTF8All = %q", got)
	}
}

// check is what every escaped string must satisfy, whatever the input.
func check(t *testing.T, in string) {
	shown := safetext.Show(in)
	if !utf8.ValidString(shown) {
		t.Fatalf("Show(%q) = %q: not UTF-8", in, shown)
	}
	for _, r := range shown {
		if unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) {
			t.Fatalf("Show(%q) = %q: holds %U", in, shown, r)
		}
	}
	if again := safetext.Show(shown); again != shown {
		t.Fatalf("Show is not idempotent on %q: %q, then %q", in, shown, again)
	}
	if shown != in {
		back, err := strconv.Unquote(`"` + strings.ReplaceAll(shown, `"`, `\"`) + `"`)
		if err != nil || back != in {
			t.Fatalf("Show(%q) = %q reads back as %q (%v)", in, shown, back, err)
		}
	}
	u := safetext.UTF8(in)
	if !utf8.ValidString(u) {
		t.Fatalf("UTF8(%q) = %q: not UTF-8", in, u)
	}
	if safetext.Show(u) != shown {
		t.Fatalf("Show(UTF8(%q)) = %q, want Show's own %q", in, safetext.Show(u), shown)
	}
}

func TestProperties(t *testing.T) {
	for _, s := range []string{"", "a", "\\", "\x00", "\xff", "\u202e", `\x41` + "\n", "\"q\"\x1b", "\xed\xa0\x80"} {
		check(t, s)
	}
}

func FuzzShow(f *testing.F) {
	for _, s := range []string{"plain", "\x1b[2J", "a\\b\n", "\xff\xfe", "\u202e\u0085", `\u0041` + "\t"} {
		f.Add(s)
	}
	f.Fuzz(check)
}

// FirstUnsafe names the first thing Show escapes, and finds something exactly when Show
// changes the text.
func TestFirstUnsafe(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"café \\ plain", ""},
		{"a\nb", "U+000A"},
		{"\x1b[31m", "U+001B"},
		{"left\u200fright", "U+200F"},
		{"x\u202ey", "U+202E"},
		{"ok\xffno", "byte 0xff, not UTF-8"},
		{"carried \uFFFD", ""},
	} {
		got, ok := safetext.FirstUnsafe(tc.in)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("safetext.FirstUnsafe(%q) = %q, %v; want %q", tc.in, got, ok, tc.want)
		}
		if _, ok := safetext.FirstUnsafe(tc.in); ok != (safetext.Show(tc.in) != tc.in) {
			t.Errorf("%q: FirstUnsafe finds %v, but Show changes it: %v", tc.in, ok, safetext.Show(tc.in) != tc.in)
		}
	}
}

func TestCut(t *testing.T) {
	if got := safetext.Cut("short", 100); got != "short" {
		t.Errorf("Cut of a short text = %q, want it unchanged", got)
	}
	long := strings.Repeat("é", 1000) // 2,000 bytes, two a rune
	got := safetext.Cut(long, 101)
	if len(got) > 101 {
		t.Errorf("Cut(…, 101) is %d bytes long", len(got))
	}
	if !utf8.ValidString(got) {
		t.Errorf("Cut split a rune: %q", got)
	}
	kept := got[:strings.Index(got, "…")]
	if want := fmt.Sprintf("… (%d more bytes)", len(long)-len(kept)); !strings.HasSuffix(got, want) {
		t.Errorf("Cut = %q, want it to end %q", got, want)
	}
	if !strings.HasPrefix(long, kept) || len(kept) == 0 {
		t.Errorf("Cut kept %q, not the start of the text", kept)
	}
}
