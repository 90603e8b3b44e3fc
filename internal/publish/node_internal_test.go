package publish

import (
	"strings"
	"testing"
)

// A published attribute holds nothing the daemon's text policy would escape: what nfd-worker
// reads from a feature file is shown as it is.
func TestAttributeTextPolicy(t *testing.T) {
	for _, tc := range []struct {
		value string
		bad   string // what the error names; "" when accepted
	}{
		{`plain, café, C:\path`, ""},
		{"two\nlines", "U+000A"},
		{"\x1b]0;title\x07", "U+001B"},
		{"rtl\u202eoverride", "U+202E"},
		{"mark\u200fhere", "U+200F"},
		{"raw\xfe", "byte 0xfe, not UTF-8"},
	} {
		err := attributeValue(tc.value)
		switch {
		case tc.bad == "" && err != nil:
			t.Errorf("%q refused: %v", tc.value, err)
		case tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad)):
			t.Errorf("%q: error %v, want one naming %s", tc.value, err, tc.bad)
		}
	}
	if err := attributeKey("a b"); err == nil || !strings.Contains(err.Error(), "spaces") {
		t.Errorf("a name with a space: %v", err)
	}
}
