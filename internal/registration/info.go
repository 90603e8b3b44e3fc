package registration

import (
	"fmt"
	"slices"
	"unicode"
	"unicode/utf8"
)

// Limits on what a plugin may answer to GetInfo. The answer comes from whatever process created
// a socket in the watched directory, so it is untrusted input: it ends up in logs, in handler
// calls (possibly inside a WebAssembly guest) and in the actual state.
const (
	// MaxTypeLen is the longest plugin type accepted, in bytes.
	MaxTypeLen = 256
	// MaxNameLen is the longest plugin name accepted, in bytes.
	MaxNameLen = 256
	// MaxEndpointLen is the longest endpoint accepted, in bytes (a path or an address).
	MaxEndpointLen = 4096
	// MaxVersions is the most supported versions accepted.
	MaxVersions = 64
	// MaxVersionLen is the longest single version accepted, in bytes.
	MaxVersionLen = 256
	// MaxInfoMessageSize caps any message received from a plugin, in bytes. A PluginInfo within
	// every limit above is well under it.
	MaxInfoMessageSize = 64 << 10
)

// ValidateInfo checks what a plugin answered to GetInfo (in.Type, in.Name, in.Endpoint and
// in.Versions) and returns it as handlers see it: Socket set to socket, an empty endpoint
// replaced by socket (as the kubelet does), and Versions copied.
//
// It refuses an empty or oversized type or name, an oversized endpoint, more than MaxVersions
// versions, an empty or oversized version, and any field that is not valid UTF-8 or holds a
// control character or a bidirectional control (an override that makes a name read otherwise
// than it is). The error wraps ErrInvalidInfo and names the socket and the field, using
// the protocol's field names (type, name, endpoint, supported_versions[i]).
func ValidateInfo(socket string, in PluginInfo) (PluginInfo, error) {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: socket %s: field %s: %s", ErrInvalidInfo, socket, field, fmt.Sprintf(format, args...))
	}
	if err := checkField(in.Type, MaxTypeLen, false); err != "" {
		return PluginInfo{}, bad("type", "%s", err)
	}
	if err := checkField(in.Name, MaxNameLen, false); err != "" {
		return PluginInfo{}, bad("name", "%s", err)
	}
	if err := checkField(in.Endpoint, MaxEndpointLen, true); err != "" {
		return PluginInfo{}, bad("endpoint", "%s", err)
	}
	if len(in.Versions) > MaxVersions {
		return PluginInfo{}, bad("supported_versions", "%d entries, more than %d", len(in.Versions), MaxVersions)
	}
	for i, v := range in.Versions {
		if err := checkField(v, MaxVersionLen, false); err != "" {
			return PluginInfo{}, bad(fmt.Sprintf("supported_versions[%d]", i), "%s", err)
		}
	}
	out := PluginInfo{
		Socket:   socket,
		Type:     in.Type,
		Name:     in.Name,
		Endpoint: in.Endpoint,
		Versions: slices.Clone(in.Versions),
	}
	if out.Endpoint == "" {
		out.Endpoint = socket
	}
	return out, nil
}

// checkField returns what is wrong with s, or "" when nothing is.
func checkField(s string, maxLen int, mayBeEmpty bool) string {
	switch {
	case s == "" && !mayBeEmpty:
		return "is empty"
	case len(s) > maxLen:
		return fmt.Sprintf("%d bytes, longer than %d", len(s), maxLen)
	}
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size <= 1 {
				return fmt.Sprintf("not valid UTF-8 at byte %d", i)
			}
		}
		if unicode.IsControl(r) {
			return fmt.Sprintf("control character %U at byte %d", r, i)
		}
		if unicode.Is(unicode.Bidi_Control, r) {
			return fmt.Sprintf("bidirectional control character %U at byte %d (it reorders how the text around it is shown)", r, i)
		}
	}
	return ""
}
