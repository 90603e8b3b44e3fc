package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The header every config file starts with, as a kubelet config file starts with
// apiVersion: kubelet.config.k8s.io/v1beta1 and kind: KubeletConfiguration. It says which
// format the rest of the file is in, so that a later format can be told apart and converted.
const (
	// APIVersion is the only version of the file format this daemon reads.
	APIVersion = "wasmhost.dev/v1alpha1"
	// Kind is the kind of object a config file holds.
	Kind = "WasmhostConfiguration"
)

// checkHeader checks that the YAML document b has apiVersion APIVersion and kind Kind at its
// top level, and says what is wrong, with the file and the field, when it has not. A document
// that is not YAML at all is left to the decoder, which says where it breaks.
func checkHeader(path string, b []byte) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil
	}
	fields := map[string]*yaml.Node{}
	if len(doc.Content) == 1 && doc.Content[0].Kind == yaml.MappingNode {
		m := doc.Content[0]
		for i := 0; i+1 < len(m.Content); i += 2 {
			fields[m.Content[i].Value] = m.Content[i+1]
		}
	}
	var errs []error
	var missing []string
	for _, f := range []struct{ key, want string }{{"apiVersion", APIVersion}, {"kind", Kind}} {
		v, ok := fields[f.key]
		switch {
		case !ok:
			missing = append(missing, f.key)
		case v.Kind != yaml.ScalarNode || v.Value != f.want:
			got := strconv.Quote(v.Value)
			if v.Kind != yaml.ScalarNode {
				got = "a " + map[yaml.Kind]string{yaml.MappingNode: "mapping", yaml.SequenceNode: "list"}[v.Kind]
			}
			errs = append(errs, &Problem{Line: v.Line, Key: f.key, Msg: fmt.Sprintf("%s is not known; accepted: %s", got, f.want)})
		}
	}
	if len(missing) > 0 {
		verb := "is"
		if len(missing) > 1 {
			verb = "are"
		}
		errs = append([]error{fmt.Errorf("%s %s missing: a config file starts with apiVersion: %s and kind: %s",
			strings.Join(missing, " and "), verb, APIVersion, Kind)}, errs...)
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("config %s: %w", path, errors.Join(errs...))
}
