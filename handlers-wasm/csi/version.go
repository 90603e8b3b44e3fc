package main

import "strings"

// version is a parsed CSI version: a semantic version, optionally written with a "v" prefix and
// with the patch number left out ("1.2" is 1.2.0).
type version struct {
	major, minor, patch uint64
	pre                 []string // pre-release identifiers; none for a release
	raw                 string   // as the plugin sent it
}

// parseVersion parses s as [v]MAJOR.MINOR[.PATCH][-PRERELEASE][+BUILD] with the syntax of
// Semantic Versioning 2.0.0 (no leading zeros in numbers, identifiers of [0-9A-Za-z-]). Only the
// "v" prefix and the optional patch number are liberties; anything else (spaces, a fourth
// number, an empty identifier) makes it not a version.
func parseVersion(s string) (version, bool) {
	v := version{raw: s}
	rest := s
	if strings.HasPrefix(rest, "v") || strings.HasPrefix(rest, "V") {
		rest = rest[1:]
	}
	if i := strings.IndexByte(rest, '+'); i >= 0 {
		if !validIdentifiers(rest[i+1:], false) {
			return version{}, false
		}
		rest = rest[:i]
	}
	if i := strings.IndexByte(rest, '-'); i >= 0 {
		if !validIdentifiers(rest[i+1:], true) {
			return version{}, false
		}
		v.pre = strings.Split(rest[i+1:], ".")
		rest = rest[:i]
	}
	nums := strings.Split(rest, ".")
	if len(nums) < 2 || len(nums) > 3 {
		return version{}, false
	}
	var parsed [3]uint64
	for i, n := range nums {
		x, ok := parseNumber(n)
		if !ok {
			return version{}, false
		}
		parsed[i] = x
	}
	v.major, v.minor, v.patch = parsed[0], parsed[1], parsed[2]
	return v, true
}

// parseNumber parses a decimal number without sign or leading zeros.
func parseNumber(s string) (uint64, bool) {
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	var x uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if x > (1<<64-1-d)/10 {
			return 0, false // overflows
		}
		x = x*10 + d
	}
	return x, true
}

// validIdentifiers reports whether s is a dot-separated list of non-empty [0-9A-Za-z-]
// identifiers; in a pre-release, numeric identifiers must not have leading zeros.
func validIdentifiers(s string, pre bool) bool {
	for _, id := range strings.Split(s, ".") {
		if id == "" {
			return false
		}
		numeric := true
		for i := 0; i < len(id); i++ {
			c := id[i]
			switch {
			case c >= '0' && c <= '9':
			case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '-':
				numeric = false
			default:
				return false
			}
		}
		if pre && numeric && len(id) > 1 && id[0] == '0' {
			return false
		}
	}
	return true
}

// compare returns -1, 0 or +1 as a has lower, equal or higher precedence than b, by the rules
// of Semantic Versioning (build metadata does not count).
func compare(a, b version) int {
	for _, d := range [3][2]uint64{{a.major, b.major}, {a.minor, b.minor}, {a.patch, b.patch}} {
		if d[0] != d[1] {
			return cmpUint(d[0], d[1])
		}
	}
	switch {
	case len(a.pre) == 0 && len(b.pre) == 0:
		return 0
	case len(a.pre) == 0:
		return 1 // a release is above its pre-releases
	case len(b.pre) == 0:
		return -1
	}
	for i := 0; i < len(a.pre) && i < len(b.pre); i++ {
		if c := compareIdentifier(a.pre[i], b.pre[i]); c != 0 {
			return c
		}
	}
	return cmpUint(uint64(len(a.pre)), uint64(len(b.pre)))
}

// compareIdentifier orders two pre-release identifiers: numbers numerically and below words,
// words in ASCII order.
func compareIdentifier(a, b string) int {
	na, aNum := parseNumber(a)
	nb, bNum := parseNumber(b)
	switch {
	case aNum && bNum:
		return cmpUint(na, nb)
	case aNum:
		return -1
	case bNum:
		return 1
	}
	return strings.Compare(a, b)
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// supportedMajor is the CSI major version this handler supports, as the kubelet does: CSI 1.x
// releases are backward compatible with each other, a 2.x would not have to be.
const supportedMajor = 1

// supportedText describes the supported versions in reasons.
const supportedText = "a semantic version with major 1, such as 1.0.0, 1.2 or v1.5.0"

// highestSupported returns the highest of versions that this handler supports. Of versions of
// equal precedence ("1.0", "v1.0.0") the first one sent is returned.
func highestSupported(versions []string) (version, bool) {
	var best version
	found := false
	for _, s := range versions {
		v, ok := parseVersion(s)
		if !ok || v.major != supportedMajor {
			continue
		}
		if !found || compare(v, best) > 0 {
			best, found = v, true
		}
	}
	return best, found
}
