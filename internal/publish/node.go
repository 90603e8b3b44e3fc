package publish

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/wasmhost/wasmhost/internal/k8sname"
	"github.com/wasmhost/wasmhost/internal/safetext"
	"github.com/wasmhost/wasmhost/internal/state"
)

// Rules are what of a plugin type's published keys reach the cluster, and under which names
// (the operator's handlers.types.<T>.publish).
type Rules struct {
	// Namespace is the type's label prefix and feature name. Required.
	Namespace string
	// Labels are keys whose values become labels <Namespace>/<plugin>.<key> (and attributes).
	Labels []string
	// Attributes are keys that become attributes only; "*" is every key published.
	Attributes []string
}

// Node is what the publisher tells the cluster about its node: node-feature-discovery's
// labels, attributes and instances.
type Node struct {
	// Labels are node labels by key: <namespace>/<plugin> = "true" for each plugin registered,
	// <namespace>/<plugin>.<key> for each key of Rules.Labels it published.
	Labels map[string]string
	// Attributes are, by feature (a type's namespace), <plugin>.<key> = value for every key
	// of the type's Labels and Attributes that each plugin published.
	Attributes map[string]map[string]string
	// Instances are, by feature, one set of attributes per plugin instance registered
	// (standbys included): Instance* keys and the keys the rules publish.
	Instances map[string][]map[string]string
}

// The attributes of an instance that say which plugin it is, besides what its handler
// published. A published key never contains '/', so these cannot collide.
const (
	InstanceType     = "wasmhost.dev/type"
	InstanceName     = "wasmhost.dev/name"
	InstanceState    = "wasmhost.dev/state"
	InstanceSocket   = "wasmhost.dev/socket"
	InstanceVersions = "wasmhost.dev/versions"
	InstanceHandler  = "wasmhost.dev/handler"
)

// Refusal is a key that could not be published as it was asked to, and why.
type Refusal struct {
	PluginType, Plugin, Key string
	// Label: refused as a label only (it is still an attribute); else refused entirely.
	Label  bool
	Reason string
}

func (r Refusal) String() string {
	what := "refused"
	if r.Label {
		what = "not a label (still an attribute)"
	}
	if r.Key == "" {
		return fmt.Sprintf("plugin %s of type %s: %s: %s", r.Plugin, r.PluginType, what, r.Reason)
	}
	return fmt.Sprintf("key %s of plugin %s (type %s): %s: %s", r.Key, r.Plugin, r.PluginType, what, r.Reason)
}

// Empty returns a Node with nothing in it.
func Empty() Node {
	return Node{Labels: map[string]string{}, Attributes: map[string]map[string]string{}, Instances: map[string][]map[string]string{}}
}

// Equal reports whether two Nodes say the same (instances in any order).
func (n Node) Equal(o Node) bool {
	if !maps.Equal(n.Labels, o.Labels) || len(n.Attributes) != len(o.Attributes) || len(n.Instances) != len(o.Instances) {
		return false
	}
	for f, a := range n.Attributes {
		if b, ok := o.Attributes[f]; !ok || !maps.Equal(a, b) {
			return false
		}
	}
	for f, a := range n.Instances {
		b, ok := o.Instances[f]
		if !ok || len(a) != len(b) {
			return false
		}
		as, bs := sortedInstances(a), sortedInstances(b)
		for i := range as {
			if !maps.Equal(as[i], bs[i]) {
				return false
			}
		}
	}
	return true
}

func instanceKey(m map[string]string) string { return m[InstanceSocket] + "\x00" + m[InstanceName] }

func sortedInstances(in []map[string]string) []map[string]string {
	out := slices.Clone(in)
	slices.SortFunc(out, func(a, b map[string]string) int { return strings.Compare(instanceKey(a), instanceKey(b)) })
	return out
}

// Size returns how many labels, attributes and instances n holds.
func (n Node) Size() (labels, attributes, instances int) {
	for _, a := range n.Attributes {
		attributes += len(a)
	}
	for _, in := range n.Instances {
		instances += len(in)
	}
	return len(n.Labels), attributes, instances
}

// attributeKey returns nil if k may be an attribute's name: something a feature file line
// and a NodeFeatureRule can carry.
func attributeKey(k string) error {
	if k == "" || strings.HasPrefix(k, "#") || strings.ContainsAny(k, "=") {
		return fmt.Errorf("an attribute name must not be empty, start with '#' or contain '='")
	}
	return printable(k, "an attribute name")
}

// attributeValue returns nil if v may be an attribute's value (one line of a feature file,
// without white space at its ends, which nfd-worker trims).
func attributeValue(v string) error {
	if strings.TrimSpace(v) != v {
		return fmt.Errorf("an attribute value must not start or end with white space")
	}
	return printable(v, "an attribute value")
}

// printable returns nil if s holds nothing that the daemon's text policy (safetext) escapes:
// a feature file holds it as it is, one line of it, shown as it is by whoever reads it.
func printable(s, what string) error {
	if bad, ok := safetext.FirstUnsafe(s); ok {
		return fmt.Errorf("%s must not hold control characters, bidirectional formatting characters or invalid UTF-8 (%s)", what, bad)
	}
	if what == "an attribute name" && strings.Contains(s, " ") {
		return fmt.Errorf("%s must not hold spaces", what)
	}
	return nil
}

// Build returns what the cluster should know of the plugins in views (the store's), by the
// rules of their types, and what it refused: a key that cannot be a label is still an
// attribute; a key or value that cannot be an attribute either is left out. Types without
// rules publish nothing.
func Build(views []state.PluginView, rules map[string]Rules) (Node, []Refusal) {
	n := Empty()
	var refused []Refusal
	for _, v := range views {
		r, ok := rules[v.PluginType]
		if !ok || r.Namespace == "" {
			continue
		}
		ns, name := r.Namespace, v.PluginName
		if !v.Registered {
			// A plugin of the type that is not registered is an instance with its state and no
			// facts (the fleet view shows it failing, rejected or waiting for a handler). A retry
			// goes failing → pending → failing: a pending plugin that failed before shows as
			// failing, so that the object does not change at every attempt.
			st := v.State
			if st == state.StatePending && v.LastError != "" {
				st = state.StateFailing
			}
			if v.PluginName == "" || (st != state.StateFailing && st != state.StateRejected && st != state.StateWaitingForHandler) {
				continue
			}
			if n.Instances[ns] == nil {
				n.Instances[ns] = []map[string]string{}
			}
			n.Instances[ns] = append(n.Instances[ns], sanitizeInstance(map[string]string{
				InstanceType: v.PluginType, InstanceName: name, InstanceState: string(st), InstanceSocket: v.Path,
				InstanceVersions: strings.Join(v.PluginVersions, ","),
			}))
			continue
		}
		refuse := func(key string, label bool, err error) {
			refused = append(refused, Refusal{PluginType: v.PluginType, Plugin: name, Key: key, Label: label, Reason: err.Error()})
		}
		inst := map[string]string{
			InstanceType:     v.PluginType,
			InstanceName:     name,
			InstanceState:    string(v.State),
			InstanceSocket:   v.Path,
			InstanceVersions: strings.Join(v.PluginVersions, ","),
		}
		if v.HandlerSHA256 != "" {
			inst[InstanceHandler] = "sha256:" + v.HandlerSHA256
		}
		inst = sanitizeInstance(inst)
		if n.Instances[ns] == nil {
			n.Instances[ns] = []map[string]string{}
		}
		active := v.State != state.StateStandby
		// What of the published keys the rules name, and how.
		asLabel := map[string]bool{}
		for _, k := range r.Labels {
			asLabel[k] = true
		}
		var keys []string
		for k := range v.Published {
			if asLabel[k] || slices.Contains(r.Attributes, k) || slices.Contains(r.Attributes, "*") {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		nameErr := attributeKey(name)
		if nameErr == nil && strings.Contains(name, "/") {
			nameErr = fmt.Errorf("a plugin name with '/' cannot be part of a name in namespace %s", ns)
		}
		if nameErr != nil {
			if active {
				refuse("", false, nameErr)
			}
			n.Instances[ns] = append(n.Instances[ns], inst)
			continue
		}
		for _, k := range keys {
			val := v.Published[k]
			if strings.Contains(k, "/") {
				if active {
					refuse(k, false, fmt.Errorf("a published key with '/' would name another namespace than %s", ns))
				}
				continue
			}
			if err := attributeKey(k); err != nil {
				if active {
					refuse(k, false, err)
				}
				continue
			}
			if err := attributeValue(val); err != nil {
				if active {
					refuse(k, false, err)
				}
				continue
			}
			inst[k] = val
			if !active {
				continue
			}
			if n.Attributes[ns] == nil {
				n.Attributes[ns] = map[string]string{}
			}
			n.Attributes[ns][name+"."+k] = val
			if !asLabel[k] {
				continue
			}
			if err := k8sname.LabelName(name + "." + k); err != nil {
				refuse(k, true, fmt.Errorf("label name %s.%s: %w", name, k, err))
			} else if err := k8sname.LabelValue(val); err != nil {
				refuse(k, true, fmt.Errorf("value %q: %w", truncate(val, 80), err))
			} else {
				n.Labels[ns+"/"+name+"."+k] = val
			}
		}
		if active {
			if err := k8sname.LabelName(name); err != nil {
				refuse("", true, fmt.Errorf("plugin name as a label name: %w", err))
			} else {
				n.Labels[ns+"/"+name] = "true"
			}
		}
		n.Instances[ns] = append(n.Instances[ns], inst)
	}
	for ns, in := range n.Instances {
		n.Instances[ns] = sortedInstances(in)
	}
	return n, refused
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// merge returns desired with what held has and desired does not added: at start, what a
// sink held from the daemon's previous run stays until the plugins had their chance to
// register again.
func merge(desired, held Node) Node {
	out := Empty()
	maps.Copy(out.Labels, held.Labels)
	maps.Copy(out.Labels, desired.Labels)
	for f, a := range held.Attributes {
		out.Attributes[f] = maps.Clone(a)
	}
	for f, a := range desired.Attributes {
		if out.Attributes[f] == nil {
			out.Attributes[f] = map[string]string{}
		}
		maps.Copy(out.Attributes[f], a)
	}
	for f, in := range desired.Instances {
		out.Instances[f] = slices.Clone(in)
	}
	for f, in := range held.Instances {
		have := map[string]bool{}
		for _, m := range out.Instances[f] {
			have[m[InstanceSocket]] = true
		}
		for _, m := range in {
			if !have[m[InstanceSocket]] {
				out.Instances[f] = append(out.Instances[f], m)
			}
		}
		out.Instances[f] = sortedInstances(out.Instances[f])
	}
	return out
}

// sanitizeInstance makes the values of an instance's own attributes (type, name, state, socket,
// versions: what the plugin sent, not what a handler published) valid attribute values.
func sanitizeInstance(inst map[string]string) map[string]string {
	for k, val := range inst {
		if attributeValue(val) != nil {
			inst[k] = strings.ToValidUTF8(strings.Map(func(r rune) rune {
				if r < 0x20 || r == 0x7f {
					return '?'
				}
				return r
			}, strings.TrimSpace(val)), "?")
		}
	}
	return inst
}
