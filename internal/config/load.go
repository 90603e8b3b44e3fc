package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Problem is one mistake in a configuration: the key, in the file's own spelling
// (reconciler.maxConcurrent), the line of the file that set it when it came from one, and what
// is wrong. A key that a flag of wasmhost run also sets names the flag too.
type Problem struct {
	Line int // 0: not from a file, or not known
	Key  string
	Msg  string
}

func (p *Problem) Error() string {
	var b strings.Builder
	if p.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", p.Line)
	}
	b.WriteString(p.Key)
	if f := flagOf[p.Key]; f != "" {
		b.WriteString(" (flag " + f + ")")
	}
	b.WriteString(": " + p.Msg)
	return b.String()
}

// flagOf names the flag of wasmhost run that sets a key (cmd/wasmhost binds them; a test there
// keeps the two lists the same).
var flagOf = map[string]string{
	"socketDir":              "--socket-dir",
	"handlerDir":             "--handler-dir",
	"stateDir":               "--state-dir",
	"shutdownTimeout":        "--shutdown-timeout",
	"log.format":             "--log-format",
	"log.level":              "--log-level",
	"handlers.callTimeout":   "--handler-timeout",
	"handlers.memoryLimit":   "--handler-memory-limit",
	"handlers.allowInsecure": "--allow-insecure-handlers",
	"admin.socket":           "--admin-socket",
	"metrics.listen":         "--metrics-listen",
}

// Flags returns the flags of wasmhost run by the key each sets.
func Flags() map[string]string { return maps.Clone(flagOf) }

// Retired are the keys that were settings once and are constants now (docs/configuration.md,
// "Constants"), with their value: a file that sets one still loads, with a warning that the
// key is ignored. The values of those kept as fields (yaml:"-") are Default's (retired.go).
var Retired = retired()

// Load reads the YAML config file path over into (the defaults, usually) and reports every
// mistake of the file at once, each a *Problem with its line and key: unknown keys (with the
// key meant, when one is close), values that are not of the key's kind. The file starts with
// the header apiVersion: wasmhost.dev/v1alpha1 and kind: WasmhostConfiguration; a file that
// is not YAML, or has no such header, is refused before anything else. Keys that are constants
// now (Retired) are ignored, each with a warning. Validate then checks the values, naming the
// lines this file set them on.
func Load(path string, into *Config) (warnings []string, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if err := checkHeader(path, b); err != nil {
		return nil, err
	}
	var root yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(b)).Decode(&root); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	if len(root.Content) != 1 {
		return nil, nil
	}
	doc := root.Content[0]
	w := walker{lines: map[string]int{}}
	w.walk(doc, reflect.TypeFor[Config](), "")
	into.lines = w.lines
	if err := doc.Decode(into); err != nil {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return w.warnings, fmt.Errorf("config %s: %w", path, err)
		}
		keys := keysByLine(doc, "", map[int]string{})
		containers := containersByLine(doc, "", map[int]string{})
		for _, msg := range te.Errors {
			w.problems = append(w.problems, typeProblem(msg, keys, containers))
		}
	}
	if len(w.problems) > 0 {
		return w.warnings, fmt.Errorf("config %s:\n%w", path, joinProblems(w.problems))
	}
	into.defaultTracingEndpoint()
	return w.warnings, nil
}

// Check loads path over into and validates the result: every mistake of the file in one list,
// by line.
func Check(path string, into *Config) (warnings []string, err error) {
	warnings, err = Load(path, into)
	var problems []error
	if err != nil {
		if !collectProblems(err, &problems) {
			return warnings, err // not YAML, no header, not readable: nothing more to say
		}
	}
	if err := into.Validate(); err != nil {
		collectProblems(err, &problems)
	}
	if len(problems) == 0 {
		return warnings, nil
	}
	return warnings, fmt.Errorf("config %s:\n%w", path, joinProblems(problems))
}

// Join puts the problems of Load (err, as it returned it) and of Validate (verr) into one list,
// by line; an error of Load that is not a list of problems is returned as it is.
func Join(path string, err, verr error) error {
	var problems []error
	if err != nil && !collectProblems(err, &problems) {
		return err
	}
	if verr != nil {
		collectProblems(verr, &problems)
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("config %s:\n%w", path, joinProblems(problems))
}

// collectProblems appends the *Problems err holds to out, and reports whether err held only
// problems.
func collectProblems(err error, out *[]error) bool {
	var walk func(error) bool
	walk = func(e error) bool {
		if p, ok := e.(*Problem); ok {
			*out = append(*out, p)
			return true
		}
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			all := true
			for _, c := range j.Unwrap() {
				all = walk(c) && all
			}
			return all
		}
		if u := errors.Unwrap(e); u != nil {
			return walk(u)
		}
		return false
	}
	return walk(err)
}

// joinProblems sorts problems by line (those without one last), then by key.
func joinProblems(errs []error) error {
	slices.SortStableFunc(errs, func(a, b error) int {
		pa, _ := a.(*Problem)
		pb, _ := b.(*Problem)
		if pa == nil || pb == nil {
			return strings.Compare(a.Error(), b.Error())
		}
		la, lb := pa.Line, pb.Line
		if la == 0 {
			la = 1 << 30
		}
		if lb == 0 {
			lb = 1 << 30
		}
		return cmp.Or(cmp.Compare(la, lb), strings.Compare(pa.Key, pb.Key), strings.Compare(pa.Msg, pb.Msg))
	})
	return errors.Join(errs...)
}

var unmarshalRE = regexp.MustCompile("^line (\\d+): cannot unmarshal !!(\\w+)(?: `(.*)`)? into (.+)$")
var lineRE = regexp.MustCompile(`^line (\d+): (.*)$`)

// typeProblem turns a message of the YAML decoder into a Problem in the config's terms: the
// key, and the kind of value wanted rather than a Go type. A mapping or a list where a value
// was wanted is on the line of its first entry: containers names whose it is.
func typeProblem(msg string, keys, containers map[int]string) *Problem {
	p := &Problem{Msg: msg}
	if m := unmarshalRE.FindStringSubmatch(msg); m != nil {
		fmt.Sscan(m[1], &p.Line)
		p.Msg = fmt.Sprintf("want %s, got %s", kindOf(m[4]), describe(m[2], m[3]))
		if k := containers[p.Line]; k != "" && (m[2] == "map" || m[2] == "seq") {
			p.Key = k
		}
	} else if m := lineRE.FindStringSubmatch(msg); m != nil {
		fmt.Sscan(m[1], &p.Line)
		p.Msg = m[2]
	}
	if p.Key == "" {
		p.Key = keys[p.Line]
	}
	if p.Key == "" {
		p.Key = "(document)"
	}
	return p
}

func kindOf(goType string) string {
	switch {
	case strings.HasPrefix(goType, "[]"):
		return "a list"
	case strings.HasPrefix(goType, "map["), strings.HasPrefix(goType, "config."):
		return "a mapping of keys"
	case goType == "bool":
		return "true or false"
	case strings.HasPrefix(goType, "int"), strings.HasPrefix(goType, "uint"):
		return "a whole number"
	case strings.HasPrefix(goType, "float"):
		return "a number"
	case goType == "string":
		return "a string"
	}
	return "another kind of value"
}

func describe(tag, value string) string {
	switch tag {
	case "map":
		return "a mapping"
	case "seq":
		return "a list"
	}
	return fmt.Sprintf("%q", value)
}

// walker checks the keys of a YAML document against the struct it is decoded into, removing
// the keys it reports (unknown) or warns about (retired) so that the decoder sees only known
// ones, and records the line of every key.
type walker struct {
	lines    map[string]int
	problems []error
	warnings []string
}

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

func (w *walker) walk(n *yaml.Node, t reflect.Type, prefix string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return
	}
	switch {
	case n.Kind == yaml.SequenceNode && t.Kind() == reflect.Slice:
		for _, c := range n.Content {
			w.walk(c, t.Elem(), prefix)
		}
	case n.Kind == yaml.MappingNode && t.Kind() == reflect.Map:
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := join(prefix, n.Content[i].Value)
			w.lines[key] = n.Content[i].Line
			w.walk(n.Content[i+1], t.Elem(), key)
		}
	case n.Kind == yaml.MappingNode && t.Kind() == reflect.Struct:
		fields := map[string]reflect.Type{}
		var names []string
		for f := range t.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "" || name == "-" || !f.IsExported() {
				continue
			}
			fields[name] = f.Type
			names = append(names, name)
		}
		kept := n.Content[:0:0]
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			key := join(prefix, k.Value)
			ft, ok := fields[k.Value]
			switch {
			case ok:
				w.lines[key] = k.Line
				w.walk(v, ft, key)
				kept = append(kept, k, v)
			case Retired[key] != "":
				w.warnings = append(w.warnings, fmt.Sprintf("line %d: %s is ignored: it is a constant now (%s), no longer a setting (docs/configuration.md, \"Constants\")", k.Line, key, Retired[key]))
			default:
				msg := "unknown key"
				if near := nearest(k.Value, names); near != "" {
					msg += fmt.Sprintf("; did you mean %s?", join(prefix, near))
				} else if prefix == "" {
					msg += "; wasmhost config defaults prints every key"
				} else {
					msg += fmt.Sprintf("; %s has %s", prefix, strings.Join(names, ", "))
				}
				w.problems = append(w.problems, &Problem{Line: k.Line, Key: key, Msg: msg})
			}
		}
		n.Content = kept
	}
}

func join(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

// nearest returns the name in names that s most likely misspells: the same but for case, or
// within a few edits; "" when none is close.
func nearest(s string, names []string) string {
	best, bestD := "", 1<<30
	for _, n := range names {
		if strings.EqualFold(n, s) {
			return n
		}
		if d := editDistance(strings.ToLower(s), strings.ToLower(n)); d < bestD {
			best, bestD = n, d
		}
	}
	if bestD <= max(2, len(s)/4) {
		return best
	}
	return ""
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// keysByLine maps each line of a YAML document to the dotted key whose value is on it.
func keysByLine(n *yaml.Node, prefix string, out map[int]string) map[int]string {
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for _, c := range n.Content {
			keysByLine(c, prefix, out)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := join(prefix, n.Content[i].Value)
			out[n.Content[i].Line] = key
			if v := n.Content[i+1]; v.Line != n.Content[i].Line || v.Kind == yaml.ScalarNode {
				if _, taken := out[v.Line]; !taken || v.Line == n.Content[i].Line {
					out[v.Line] = key
				}
			}
			keysByLine(n.Content[i+1], key, out)
		}
	}
	return out
}

// containersByLine maps the first line of each mapping or list that is a key's value to the key.
func containersByLine(n *yaml.Node, prefix string, out map[int]string) map[int]string {
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for _, c := range n.Content {
			containersByLine(c, prefix, out)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := join(prefix, n.Content[i].Value)
			if v := n.Content[i+1]; v.Kind == yaml.MappingNode || v.Kind == yaml.SequenceNode {
				if _, taken := out[v.Line]; !taken {
					out[v.Line] = key
				}
			}
			containersByLine(n.Content[i+1], key, out)
		}
	}
	return out
}
