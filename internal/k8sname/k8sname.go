// Package k8sname checks names and values against Kubernetes' rules for labels and DNS
// subdomains, as the API server applies them (apimachinery's validation), so that what the
// daemon publishes is refused here with a reason rather than by the API server or by
// node-feature-discovery with a log line on another node. Standard library only: the daemon
// checks its configuration without a client library.
//
// This package is part of the daemon, not a stable API.
package k8sname

import (
	"fmt"
	"strings"
)

// Limits of the Kubernetes rules.
const (
	// MaxLabelValue is the longest label value, and the longest name part of a label key.
	MaxLabelValue = 63
	// MaxSubdomain is the longest DNS subdomain: a label key's prefix, an object's name.
	MaxSubdomain = 253
)

func alnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// LabelValue returns nil if v may be a label's value: empty, or at most 63 characters,
// alphanumerics with '-', '_' and '.' inside.
func LabelValue(v string) error {
	if v == "" {
		return nil
	}
	if len(v) > MaxLabelValue {
		return fmt.Errorf("%d characters, over the %d of a label value", len(v), MaxLabelValue)
	}
	return nameChars(v, "a label value")
}

// LabelName returns nil if n may be the name part of a label key (after the prefix's '/'):
// 1 to 63 characters, alphanumerics with '-', '_' and '.' inside.
func LabelName(n string) error {
	if n == "" {
		return fmt.Errorf("empty: a label's name part needs 1 to %d characters", MaxLabelValue)
	}
	if len(n) > MaxLabelValue {
		return fmt.Errorf("%d characters, over the %d of a label's name part", len(n), MaxLabelValue)
	}
	return nameChars(n, "a label's name part")
}

func nameChars(s, what string) error {
	if !alnum(s[0]) || !alnum(s[len(s)-1]) {
		return fmt.Errorf("%s must start and end with a letter or digit", what)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !alnum(c) && c != '-' && c != '_' && c != '.' {
			return fmt.Errorf("%q is not allowed in %s (letters, digits, '-', '_', '.')", rune(c), what)
		}
	}
	return nil
}

// Subdomain returns nil if s is a DNS subdomain (RFC 1123): at most 253 characters of
// lower-case alphanumerics, '-' and '.', each dot-separated part starting and ending with an
// alphanumeric. Label key prefixes, object names and namespaces' parents are subdomains.
func Subdomain(s string) error {
	if s == "" {
		return fmt.Errorf("empty: a DNS subdomain needs 1 to %d characters", MaxSubdomain)
	}
	if len(s) > MaxSubdomain {
		return fmt.Errorf("%d characters, over the %d of a DNS subdomain", len(s), MaxSubdomain)
	}
	for _, part := range strings.Split(s, ".") {
		if part == "" {
			return fmt.Errorf("%q has an empty part between dots", s)
		}
		for i := 0; i < len(part); i++ {
			c := part[i]
			lowerAlnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
			if !lowerAlnum && (c != '-' || i == 0 || i == len(part)-1) {
				return fmt.Errorf("%q is not a DNS subdomain (lower-case letters, digits, '-' inside a part, '.' between parts)", s)
			}
		}
	}
	return nil
}

// Label returns nil if prefix/name=value is a valid label.
func Label(key, value string) error {
	prefix, name, ok := strings.Cut(key, "/")
	if !ok {
		name, prefix = prefix, ""
	}
	if ok {
		if err := Subdomain(prefix); err != nil {
			return fmt.Errorf("label %s: prefix: %w", key, err)
		}
	}
	if err := LabelName(name); err != nil {
		return fmt.Errorf("label %s: %w", key, err)
	}
	if err := LabelValue(value); err != nil {
		return fmt.Errorf("label %s: value %q: %w", key, value, err)
	}
	return nil
}

// ReservedPrefix reports whether a label prefix belongs to Kubernetes itself
// (kubernetes.io and k8s.io and their subdomains), where node-feature-discovery writes only
// under feature.node.kubernetes.io and profile.node.kubernetes.io.
func ReservedPrefix(prefix string) bool {
	for _, allowed := range []string{"feature.node.kubernetes.io", "profile.node.kubernetes.io"} {
		if prefix == allowed || strings.HasSuffix(prefix, "."+allowed) {
			return false
		}
	}
	for _, r := range []string{"kubernetes.io", "k8s.io"} {
		if prefix == r || strings.HasSuffix(prefix, "."+r) {
			return true
		}
	}
	return false
}
