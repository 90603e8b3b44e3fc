package session

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFileNamer: every name fits NAME_MAX, is a plain file name of the directory, and differs
// from every other, for the shapes a plugin's name can take.
func TestFileNamer(t *testing.T) {
	long := strings.Repeat("a", 250)
	prefix := strings.Repeat("p", 240)
	cases := []struct{ typ, name, want string }{
		{"CSIPlugin", "csi.example.com", "CSIPlugin-csi.example.com.yaml"},
		{"CSIPlugin", "csi.example.com", "CSIPlugin-csi.example.com-2.yaml"},
		{"CSIPlugin", "csi/example", "CSIPlugin-csi_example.yaml"},
		{"CSIPlugin", "csi_example", "CSIPlugin-csi_example-2.yaml"},
		{"CSIPlugin", "..", "CSIPlugin-_...yaml"},
		{".hidden", "../../etc/passwd", "_.hidden-_.._.._etc_passwd.yaml"},
		{"CSIPlugin", long, ""},
		{"CSIPlugin", long, ""},
		{"CSIPlugin", prefix + "-one", ""},
		{"CSIPlugin", prefix + "-two", ""},
		{"DRAPlugin", strings.Repeat("é", 200), ""},
	}
	dir := t.TempDir()
	var n FileNamer
	seen := map[string]bool{}
	for _, c := range cases {
		f := n.Name(c.typ, c.name)
		if c.want != "" && f != c.want {
			t.Errorf("Name(%q, %q) = %q, want %q", c.typ, c.name, f, c.want)
		}
		if len(f) > MaxFileName || seen[f] || strings.ContainsAny(f, "/\x00") || strings.HasPrefix(f, ".") || !strings.HasSuffix(f, ".yaml") {
			t.Errorf("Name(%q, %q…) = %q (%d bytes): not a unique plain file name of at most %d bytes", c.typ, c.name[:min(len(c.name), 20)], f, len(f), MaxFileName)
		}
		seen[f] = true
		// The file system takes it, in the directory itself.
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o600); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	if got, _ := os.ReadDir(dir); len(got) != len(cases) {
		t.Errorf("%d files written, want %d", len(got), len(cases))
	}
	// Long names keep their start, so that a listing still says whose they are.
	if f := n.Name("CSIPlugin", prefix+"-three"); !strings.HasPrefix(f, "CSIPlugin-"+prefix[:200]) || len(f) != MaxFileName {
		t.Errorf("a long name shortened to %q", f)
	}
}
