package publish

import (
	"strings"
	"unicode/utf8"
)

// Bounds of what reaches the cluster, in bytes as the sinks hold it (Cost). Build counts
// every entry where it is made and leaves out, with a Refusal, what goes over: one key, one
// plugin, one type's share or the node's total, never the whole sink. RATIONALE: a sink is
// shared by every plugin type of the node, and a write refused for its size (nfd-worker's 64
// KiB per file, etcd's 1.5 MiB per request, the API server's 3 MiB per body) would stop
// every type's labels at once.
const (
	// MaxKeyBytes bounds one published key as it reaches the cluster: its attribute (and its
	// label, when it is one). A label is at most 63 bytes; what NodeFeatureRules match on is
	// short (a node id, a zone); 2 KiB leaves room for a long topology.
	MaxKeyBytes = 2 << 10
	// MaxPluginBytes bounds one plugin: its presence label, its instance and its keys. A
	// plugin over it loses its largest keys first.
	MaxPluginBytes = 4 << 10
	// DefaultMaxBytes is the node's total (publish.maxBytes) unless set: the 16 KiB per
	// object that keeps a fleet of 5,000 nodes within its API budget. Every plugin type that
	// publishes has an equal share of it, so that one type's plugins cannot crowd out
	// another's.
	DefaultMaxBytes = 16 << 10
	// MaxMaxBytes is the most publish.maxBytes may be: the object's managed fields repeat
	// every key, and both must stay under etcd's 1.5 MiB request.
	MaxMaxBytes = 512 << 10
	// maxInstanceValue bounds each of an instance's own attributes (a name, the versions: what
	// the plugin sent): cut past it, so that an instance always fits MaxPluginBytes.
	maxInstanceValue = 256
	// entryOverhead is what an entry costs beside its text: "# +no-feature\n", '=' and '\n'
	// in a feature file (16), more than the quotes, colon and comma of JSON (6).
	entryOverhead = 16
	// instanceOverhead is an instance's own cost beside its attributes (JSON braces, key).
	instanceOverhead = 32
)

// jsonLen is how many bytes s takes in JSON, counted high: the characters encoding/json
// escapes take 6 bytes each. It is at least len(s), the bytes s takes in a feature file.
func jsonLen(s string) int {
	n := len(s)
	for _, r := range s {
		switch {
		case r == '"' || r == '\\' || r == '<' || r == '>' || r == '&' || r < 0x20:
			n += 5
		case r == utf8.RuneError:
			n += 5 // an invalid byte is written as \ufffd
		case r == '\u2028' || r == '\u2029':
			n += 3
		}
	}
	return n
}

// labelCost is what label ns/name=value costs.
func labelCost(ns, name, value string) int {
	return jsonLen(ns) + 1 + jsonLen(name) + jsonLen(value) + entryOverhead
}

// attributeCost is what attribute name=value of feature ns costs (a feature file repeats
// the namespace on every line).
func attributeCost(ns, name, value string) int { return labelCost(ns, name, value) }

// instanceCost is what an instance costs.
func instanceCost(inst map[string]string) int {
	n := instanceOverhead
	for k, v := range inst {
		n += jsonLen(k) + jsonLen(v) + 6
	}
	return n
}

// Cost is what n takes in the sinks, counted as Build counts it: at least its feature file's
// lines and its NodeFeature's spec, in bytes.
func (n Node) Cost() int {
	c := 0
	for k, v := range n.Labels {
		ns, name, _ := strings.Cut(k, "/")
		c += labelCost(ns, name, v)
	}
	for ns, a := range n.Attributes {
		for k, v := range a {
			c += attributeCost(ns, k, v)
		}
	}
	for _, in := range n.Instances {
		for _, m := range in {
			c += instanceCost(m)
		}
	}
	return c
}

// The key scheme. A plugin's name and its keys share the names of its type's namespace:
// <plugin> for the plugin's presence and <plugin>_<key> for each key, as label names (after
// <namespace>/) and as attribute names. The name is escaped first (EscapeName): '%', '_' and
// '/' become %25, %5F and %2F, so it holds no '_', and the first '_' of a name ends the
// plugin's part; nor '/', which would end the namespace (a device plugin's name is its
// extended resource's, example.com/gpu, so every DevicePlugin name has one).
// No plugin name can then spell another plugin's key or presence: two names are the same
// only for the same plugin and key. A real plugin name (a DNS subdomain, as CSI and DRA
// drivers have) is left as it is; one with '_', '%' or '/' is escaped, which no label name
// can hold: it is published as attributes only.

// KeySeparator separates a plugin's name from its key.
const KeySeparator = "_"

// EscapeName returns a plugin's name as it is written in label and attribute names: '%', '_'
// and '/' escaped.
func EscapeName(plugin string) string {
	if !strings.ContainsAny(plugin, "%_/") {
		return plugin
	}
	return strings.NewReplacer("%", "%25", "_", "%5F", "/", "%2F").Replace(plugin)
}

// KeyName returns the name of a plugin's key: EscapeName(plugin) + "_" + key.
func KeyName(plugin, key string) string { return EscapeName(plugin) + KeySeparator + key }

// SplitKeyName is KeyName's inverse: the plugin and key a name names, false when it names none
// (no separator, or an escape KeyName does not write).
func SplitKeyName(name string) (plugin, key string, ok bool) {
	esc, key, ok := strings.Cut(name, KeySeparator)
	if !ok {
		return "", "", false
	}
	plugin = strings.NewReplacer("%25", "%", "%5F", "_", "%2F", "/").Replace(esc)
	if EscapeName(plugin) != esc {
		return "", "", false
	}
	return plugin, key, true
}

// cut returns s cut to at most n bytes at a character's boundary, with "…" when cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n - len("…")
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}
