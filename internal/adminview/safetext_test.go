package adminview

import (
	"bytes"
	"strings"
	"testing"
	"time"

	adminv1 "github.com/wasmhost/wasmhost/admin/v1"
)

// What plugins and handlers send is shown, never obeyed: a terminal escape, a newline that
// would add a fake row, a bidi override and bytes that are not UTF-8 are printed as escapes.
func TestTablesEscapeWhatTheyShow(t *testing.T) {
	evil := "csi\x1b]0;pwned\x07\nfake-reg.sock  CSIPlugin  x  registered\u202egnp.exe\xff"
	p := &adminv1.Plugin{Socket: "/r/" + evil, Type: "CSIPlugin", Name: evil,
		State: adminv1.PluginState_PLUGIN_STATE_REGISTERED, LastError: "boom\x1b[2J",
		Published: map[string]string{"node\x1b": "n1\x1b[31m"}}
	var out bytes.Buffer
	if err := WritePlugins(&out, []*adminv1.Plugin{p}, true, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, bad := range []string{"\x1b", "\u202e", "\xff", "\x07"} {
		if strings.Contains(s, bad) {
			t.Errorf("table has %q raw:\n%s", bad, s)
		}
	}
	if n := strings.Count(s, "\n"); n != 2 {
		t.Errorf("table has %d lines, want the header and one row:\n%s", n, s)
	}
	for _, want := range []string{`\x1b]0;pwned\x07\nfake-reg.sock`, `\u202egnp.exe\xff`, `boom\x1b[2J`, `node\x1b=n1\x1b[31m`} {
		if !strings.Contains(s, want) {
			t.Errorf("table lacks %q:\n%s", want, s)
		}
	}

	h := &adminv1.Handler{File: "/h/" + evil, PluginTypes: []string{"T\n"}, LastError: "trap\x1b[H"}
	out.Reset()
	if err := WriteHandlers(&out, []*adminv1.Handler{h}, true, time.Now()); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); strings.ContainsAny(s, "\x1b\x07\u202e") || strings.Count(s, "\n") != 2 {
		t.Errorf("handler table not escaped:\n%s", s)
	}
}
