package session

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// MaxFileName is the longest file name, in bytes, that Linux file systems take (NAME_MAX).
const MaxFileName = 255

// FileNamer names the session files of one directory (`wasmhost plugins capture`):
// <type>-<name>.yaml, then -2, -3… for further sessions of one name. A name is made of
// letters, digits, '.', '-' and '_' only (anything else becomes '_'), never starts with '.',
// and is at most MaxFileName bytes: a longer one keeps its start and ends in '~' and 12 hex
// digits of a hash of the plugin's type and name, so that names sharing a long prefix stay
// apart. The zero value is ready to use.
type FileNamer struct {
	taken map[string]bool
}

// Name returns a file name for the session of plugin name of type pluginType that no earlier
// call returned.
func (n *FileNamer) Name(pluginType, name string) string {
	if n.taken == nil {
		n.taken = make(map[string]bool)
	}
	base := fileSafe(pluginType) + "-" + fileSafe(name)
	sum := sha256.Sum256([]byte(pluginType + "\x00" + name))
	for i := 1; ; i++ {
		suffix := ""
		if i > 1 {
			suffix = fmt.Sprintf("-%d", i)
		}
		f := base + suffix + ".yaml"
		if len(f) > MaxFileName {
			tag := "~" + hex.EncodeToString(sum[:6])
			f = base[:MaxFileName-len(tag)-len(suffix)-len(".yaml")] + tag + suffix + ".yaml"
		}
		if !n.taken[f] {
			n.taken[f] = true
			return f
		}
	}
}

// fileSafe makes s part of a file name: what is not a letter, digit, '.', '-' or '_' becomes
// '_', and a leading '.' (or nothing) gets a '_' before it.
func fileSafe(s string) string {
	s = strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
			return r
		}
		return '_'
	}, s)
	if s == "" || s[0] == '.' {
		s = "_" + s
	}
	return s
}
