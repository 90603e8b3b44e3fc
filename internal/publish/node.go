package publish

import (
	"cmp"
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
	// Labels are keys whose values become labels <Namespace>/<plugin>_<key> (and attributes;
	// the key scheme: KeyName).
	Labels []string
	// Attributes are keys that become attributes only; "*" is every key published.
	Attributes []string
}

// Node is what the publisher tells the cluster about its node: node-feature-discovery's
// labels, attributes and instances.
type Node struct {
	// Labels are node labels by key: <namespace>/<plugin> = "true" for each plugin registered,
	// <namespace>/<plugin>_<key> for each key of Rules.Labels it published (the plugin's name
	// escaped: KeyName).
	Labels map[string]string
	// Attributes are, by feature (a type's namespace), <plugin>_<key> = value for every key
	// of the type's Labels and Attributes that each active plugin published.
	Attributes map[string]map[string]string
	// Instances are, by feature, one set of attributes per plugin instance registered
	// (standbys included) or failing: Instance* keys, and for a standby the keys the rules
	// publish (an active plugin's are its attributes).
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
	// Socket is the plugin's registration socket.
	Socket string
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

// Line is the refusal as a plugin's own list shows it: "<key>: <reason>", "(plugin): …" for
// the plugin itself, with "not a label (still an attribute)" for a label refused.
func (r Refusal) Line() string {
	what := r.Key
	if what == "" {
		what = "(plugin)"
	}
	if r.Label {
		return what + ": not a label (still an attribute): " + r.Reason
	}
	return what + ": " + r.Reason
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
// rules of their types, within maxBytes (DefaultMaxBytes when 0 or less), and what it
// refused: a key that cannot be a label is still an attribute; a key or value that cannot be
// an attribute either, a key over MaxKeyBytes, what goes over its plugin's MaxPluginBytes
// (its largest keys first) and a plugin over its type's share are left out. Types without
// rules publish nothing.
//
// Each type has an equal share of maxBytes. Its plugins take it in order: registered ones
// (not standbys) first, then standbys, then the instances of plugins that are not registered
// (failing, rejected, waiting for a handler), each group by the age of its socket (the file
// system's change time, which a plugin cannot set back), oldest first, then by path. A plugin
// that does not fit what is left is left out whole; the ones after it still may fit. So a
// newcomer never evicts the facts of plugins that were there before it, a restart of the
// daemon keeps the same ones, and nothing depends on chance.
func Build(views []state.PluginView, rules map[string]Rules, maxBytes int) (Node, []Refusal) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	n := Empty()
	var refused []Refusal
	var types []string
	for typ, r := range rules {
		if r.Namespace != "" {
			types = append(types, typ)
		}
	}
	if len(types) == 0 {
		return n, nil
	}
	slices.Sort(types)
	share := maxBytes / len(types)
	byType := map[string][]state.PluginView{}
	for _, v := range views {
		if slices.Contains(types, v.PluginType) {
			byType[v.PluginType] = append(byType[v.PluginType], v)
		}
	}
	for _, typ := range types {
		r, vs := rules[typ], byType[typ]
		slices.SortFunc(vs, precedence)
		room := share
		for _, v := range vs {
			f, rs := pluginFacts(v, r, min(share, MaxPluginBytes))
			refused = append(refused, rs...)
			if f == nil {
				continue
			}
			if f.cost > room {
				refused = append(refused, refusal(v, "", false, fmt.Errorf("left out whole: its %d bytes do not fit in what the plugins of older sockets leave of plugin type %s's share, %d bytes (publish.maxBytes over %d types)", f.cost, typ, share, len(types))))
				continue
			}
			room -= f.cost
			f.addTo(n, r.Namespace)
		}
	}
	for ns, in := range n.Instances {
		n.Instances[ns] = sortedInstances(in)
	}
	return n, refused
}

// precedence orders a type's plugins for its share: registered ones, then standbys, then
// the others; in each, the oldest socket first, then by path.
func precedence(a, b state.PluginView) int {
	rank := func(v state.PluginView) int {
		switch {
		case v.Registered && v.State != state.StateStandby:
			return 0
		case v.Registered:
			return 1
		}
		return 2
	}
	if c := rank(a) - rank(b); c != 0 {
		return c
	}
	if a.ID.Ctime != b.ID.Ctime {
		return cmp.Compare(a.ID.Ctime, b.ID.Ctime)
	}
	return strings.Compare(a.Path, b.Path)
}

func refusal(v state.PluginView, key string, label bool, err error) Refusal {
	return Refusal{PluginType: v.PluginType, Plugin: v.PluginName, Socket: v.Path, Key: key, Label: label, Reason: err.Error()}
}

// facts is what one plugin publishes, and what it costs.
type facts struct {
	labels map[string]string // by name (after the namespace's '/')
	attrs  map[string]string
	inst   map[string]string
	cost   int
}

func (f *facts) addTo(n Node, ns string) {
	for k, v := range f.labels {
		n.Labels[ns+"/"+k] = v
	}
	if len(f.attrs) > 0 {
		if n.Attributes[ns] == nil {
			n.Attributes[ns] = map[string]string{}
		}
		maps.Copy(n.Attributes[ns], f.attrs)
	}
	n.Instances[ns] = append(n.Instances[ns], f.inst)
}

// instanceOf returns a plugin's instance: its own attributes, each cut to maxInstanceValue.
func instanceOf(v state.PluginView, st state.PluginState) map[string]string {
	inst := map[string]string{
		InstanceType:     v.PluginType,
		InstanceName:     v.PluginName,
		InstanceState:    string(st),
		InstanceSocket:   v.Path,
		InstanceVersions: strings.Join(v.PluginVersions, ","),
	}
	if v.Registered && v.HandlerSHA256 != "" {
		inst[InstanceHandler] = "sha256:" + v.HandlerSHA256
	}
	inst = sanitizeInstance(inst)
	for k, val := range inst {
		inst[k] = cut(val, maxInstanceValue)
	}
	return inst
}

// pluginFacts returns what v publishes by r within bound bytes, and what it refused; nil
// when it publishes nothing at all. An active plugin's keys are attributes (and labels); a
// standby's are in its instance only: each published value is in the object once (and a
// label's value, at most 63 bytes, again as its attribute, which NodeFeatureRules match).
func pluginFacts(v state.PluginView, r Rules, bound int) (*facts, []Refusal) {
	if !v.Registered {
		return unregisteredFacts(v), nil
	}
	var refused []Refusal
	active := v.State != state.StateStandby
	refuse := func(key string, label bool, err error) {
		if active { // a standby has the same name as the active plugin: said once
			refused = append(refused, refusal(v, key, label, err))
		}
	}
	name := v.PluginName
	f := &facts{labels: map[string]string{}, attrs: map[string]string{}, inst: instanceOf(v, v.State)}
	f.cost = instanceCost(f.inst)
	if nameErr := attributeKey(EscapeName(name)); nameErr != nil {
		refuse("", false, nameErr)
		return f, refused
	}
	// A name that had to be escaped can be no label's: its presence is its instance and its
	// attributes, as the key scheme says, and that is no refusal (every device plugin's name
	// has a '/').
	if active && EscapeName(name) == name {
		if err := k8sname.LabelName(name); err != nil {
			refuse("", true, fmt.Errorf("plugin name as a label name: %w", err))
		} else {
			f.labels[EscapeName(name)] = "true"
			f.cost += labelCost(r.Namespace, EscapeName(name), "true")
		}
	}
	type entry struct {
		key, val string
		label    bool // a label too
		cost     int
	}
	var entries []entry
	for _, k := range publishedKeys(v, r) {
		val := v.Published[k]
		if len(k)+len(val) > MaxKeyBytes { // before looking at every character of it
			refuse(k, false, fmt.Errorf("left out: a %d-byte value, over the %d bytes a published key may take", len(val), MaxKeyBytes))
			continue
		}
		if err := keyError(k, val, r.Namespace); err != nil {
			refuse(k, false, err)
			continue
		}
		e := entry{key: k, val: val}
		if !active {
			e.cost = jsonLen(k) + jsonLen(val) + 6
		} else {
			e.cost = attributeCost(r.Namespace, KeyName(name, k), val)
			if slices.Contains(r.Labels, k) {
				if err := k8sname.LabelName(KeyName(name, k)); err != nil {
					refuse(k, true, fmt.Errorf("label name %s: %w", KeyName(name, k), err))
				} else if err := k8sname.LabelValue(val); err != nil {
					refuse(k, true, fmt.Errorf("value %q: %w", truncate(val, 80), err))
				} else {
					e.label = true
					e.cost += labelCost(r.Namespace, KeyName(name, k), val)
				}
			}
		}
		if e.cost > MaxKeyBytes {
			refuse(k, false, fmt.Errorf("left out: %d bytes (a %d-byte value), over the %d a published key may take", e.cost, len(val), MaxKeyBytes))
			continue
		}
		entries = append(entries, e)
	}
	// Over the plugin's bound, its largest keys go first.
	slices.SortFunc(entries, func(a, b entry) int {
		if c := cmp.Compare(a.cost, b.cost); c != 0 {
			return c
		}
		return strings.Compare(a.key, b.key)
	})
	for _, e := range entries {
		if f.cost+e.cost > bound {
			refuse(e.key, false, fmt.Errorf("left out: its %d bytes would take plugin %s past the %d bytes a plugin may publish", e.cost, name, bound))
			continue
		}
		f.cost += e.cost
		switch {
		case !active:
			f.inst[e.key] = e.val
		case e.label:
			f.labels[KeyName(name, e.key)] = e.val
			fallthrough
		default:
			f.attrs[KeyName(name, e.key)] = e.val
		}
	}
	return f, refused
}

// unregisteredFacts: a plugin of the type that is not registered is an instance with its
// state and no facts (the fleet view shows it failing, rejected or waiting for a handler); nil
// for one that is only pending. A retry goes failing → pending → failing: a pending plugin
// that failed before shows as failing, so that the object does not change at every attempt.
func unregisteredFacts(v state.PluginView) *facts {
	st := v.State
	if st == state.StatePending && v.LastError != "" {
		st = state.StateFailing
	}
	if v.PluginName == "" || (st != state.StateFailing && st != state.StateRejected && st != state.StateWaitingForHandler) {
		return nil
	}
	inst := instanceOf(v, st)
	return &facts{inst: inst, cost: instanceCost(inst)}
}

// publishedKeys returns the keys of v's published that r names, sorted.
func publishedKeys(v state.PluginView, r Rules) []string {
	var keys []string
	for k := range v.Published {
		if slices.Contains(r.Labels, k) || slices.Contains(r.Attributes, k) || slices.Contains(r.Attributes, "*") {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// keyError returns why a published key cannot be an attribute of namespace ns, or nil.
func keyError(k, val, ns string) error {
	if strings.Contains(k, "/") {
		return fmt.Errorf("a published key with '/' would name another namespace than %s", ns)
	}
	if err := attributeKey(k); err != nil {
		return err
	}
	return attributeValue(val)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// merge returns desired with what held has and desired does not added, within maxBytes: at
// start, what a sink held from the daemon's previous run stays until the plugins had their
// chance to register again. Held entries are added in order (labels, attributes, instances,
// each by name) while they fit: what a sink held cannot take the result past the bound.
func merge(desired, held Node, maxBytes int) Node {
	out := Empty()
	maps.Copy(out.Labels, desired.Labels)
	for f, a := range desired.Attributes {
		out.Attributes[f] = maps.Clone(a)
	}
	for f, in := range desired.Instances {
		out.Instances[f] = slices.Clone(in)
	}
	room := maxBytes - desired.Cost()
	for _, k := range slices.Sorted(maps.Keys(held.Labels)) {
		ns, name, _ := strings.Cut(k, "/")
		if _, ok := out.Labels[k]; ok || labelCost(ns, name, held.Labels[k]) > room {
			continue
		}
		out.Labels[k] = held.Labels[k]
		room -= labelCost(ns, name, held.Labels[k])
	}
	for _, f := range slices.Sorted(maps.Keys(held.Attributes)) {
		for _, k := range slices.Sorted(maps.Keys(held.Attributes[f])) {
			v := held.Attributes[f][k]
			if _, ok := out.Attributes[f][k]; ok || attributeCost(f, k, v) > room {
				continue
			}
			if out.Attributes[f] == nil {
				out.Attributes[f] = map[string]string{}
			}
			out.Attributes[f][k] = v
			room -= attributeCost(f, k, v)
		}
	}
	for _, f := range slices.Sorted(maps.Keys(held.Instances)) {
		have := map[string]bool{}
		for _, m := range out.Instances[f] {
			have[m[InstanceSocket]] = true
		}
		for _, m := range sortedInstances(held.Instances[f]) {
			if have[m[InstanceSocket]] || instanceCost(m) > room {
				continue
			}
			out.Instances[f] = append(out.Instances[f], m)
			room -= instanceCost(m)
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
