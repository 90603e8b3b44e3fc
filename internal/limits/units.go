package limits

import (
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// ByteSize is a number of bytes, written the way Kubernetes writes a memory quantity: "64Mi",
// "512Ki", "1Gi", decimal "500M" or "2G", or a plain number of bytes. The IEC forms "64MiB" and
// "512KiB" and a trailing "B" on a plain number ("7B") are read too, as older files wrote them.
type ByteSize int64

// sizeSuffixes are the suffixes ParseByteSize accepts, with what each multiplies by: the
// Kubernetes quantity suffixes for bytes (binary Ki..Ei, decimal k..E), then the IEC forms.
// The milli suffix "m" is not among them: "64m" is a classic slip for 64Mi, and a fraction of
// a byte is never meant.
var sizeSuffixes = map[string]*big.Int{
	"": big.NewInt(1), "B": big.NewInt(1),
	"Ki": pow(2, 10), "Mi": pow(2, 20), "Gi": pow(2, 30), "Ti": pow(2, 40), "Pi": pow(2, 50), "Ei": pow(2, 60),
	"KiB": pow(2, 10), "MiB": pow(2, 20), "GiB": pow(2, 30), "TiB": pow(2, 40),
	"k": pow(10, 3), "M": pow(10, 6), "G": pow(10, 9), "T": pow(10, 12), "P": pow(10, 15), "E": pow(10, 18),
}

func pow(base, exp int64) *big.Int {
	return new(big.Int).Exp(big.NewInt(base), big.NewInt(exp), nil)
}

// sizeSyntax is a quantity as Kubernetes writes one: a sign, digits with an optional fraction,
// then a suffix or a decimal exponent ("1e9"; up to two digits, enough for any int64).
var sizeSyntax = regexp.MustCompile(`^([+-]?)((?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,2}$)?)([A-Za-z]*)$`)

// sizeForms says what a size looks like, in the errors.
const sizeForms = "a number of bytes with an optional suffix: Ki, Mi, Gi, Ti (binary, e.g. 64Mi), k, M, G, T (decimal, e.g. 500M), or KiB, MiB, GiB, TiB"

// ParseByteSize reads a size as Kubernetes reads a memory quantity ("64Mi", "1Gi", "512Ki",
// "500M", "2G", "1.5Gi", "1e9", "1048576"), or in the IEC forms "64MiB", "512KiB" and "7B". A size is
// a whole number of bytes, not negative, that fits in an int64.
func ParseByteSize(s string) (ByteSize, error) {
	m := sizeSyntax.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, fmt.Errorf("%q is not a size: want %s", s, sizeForms)
	}
	sign, num, suffix := m[1], m[2], m[3]
	mult, ok := sizeSuffixes[suffix]
	if !ok {
		hint := ""
		switch suffix {
		case "m":
			hint = " (in a Kubernetes quantity m is milli, a thousandth: for mebibytes write Mi)"
		case "K":
			hint = " (the decimal kilo is a lower-case k; the binary kibi is Ki)"
		case "KB", "MB", "GB", "TB":
			hint = fmt.Sprintf(" (write %s%s for the decimal unit or %s%si for the binary one)", num, decimalOf(suffix), num, suffix[:1])
		}
		return 0, fmt.Errorf("%q is not a size: unknown suffix %q%s; want %s", s, suffix, hint, sizeForms)
	}
	if sign == "-" {
		return 0, fmt.Errorf("%q is not a size: it is negative", s)
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, fmt.Errorf("%q is not a size: want %s", s, sizeForms)
	}
	r.Mul(r, new(big.Rat).SetInt(mult))
	if !r.IsInt() {
		return 0, fmt.Errorf("%q is not a whole number of bytes", s)
	}
	if !r.Num().IsInt64() {
		return 0, fmt.Errorf("%q is too large a size", s)
	}
	return ByteSize(r.Num().Int64()), nil
}

// decimalOf is the Kubernetes decimal suffix for "KB", "MB", ...: k, M, G, T.
func decimalOf(suffix string) string {
	if suffix[0] == 'K' {
		return "k"
	}
	return suffix[:1]
}

// binaryUnits are the suffixes String writes, largest first.
var binaryUnits = []struct {
	suffix string
	mult   int64
}{{"Ei", 1 << 60}, {"Pi", 1 << 50}, {"Ti", 1 << 40}, {"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}}

// String writes the size as Kubernetes would: with the largest binary suffix that divides it
// ("64Mi", "1536Ki"), or as a plain number of bytes ("1000").
func (b ByteSize) String() string {
	if b != 0 {
		for _, u := range binaryUnits {
			if int64(b)%u.mult == 0 {
				return strconv.FormatInt(int64(b)/u.mult, 10) + u.suffix
			}
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseByteSize(n.Value)
	if err != nil {
		// A *yaml.TypeError lets the decoder go on and report every mistake at once; Load
		// names the key from the line.
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", n.Line, err)}}
	}
	*b = v
	return nil
}

// MarshalYAML writes a ByteSize as "64Mi", the way Kubernetes writes it.
func (b ByteSize) MarshalYAML() (any, error) { return b.String(), nil }

// Set and Type make ByteSize a pflag.Value, so a flag overrides the file.
func (b *ByteSize) Set(s string) error {
	v, err := ParseByteSize(s)
	if err != nil {
		return err
	}
	*b = v
	return nil
}

func (b *ByteSize) Type() string { return "size" }

// Duration is a time.Duration written as "500ms", "2m2s" in the config file and its flags.
type Duration time.Duration

func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		// A *yaml.TypeError lets the decoder go on and report every mistake at once.
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %q is not a duration (e.g. 500ms, 5s, 2m)", n.Line, n.Value)}}
	}
	*d = Duration(v)
	return nil
}

func (d Duration) String() string { return time.Duration(d).String() }

// Set and Type make Duration a pflag.Value, so a flag overrides the file.
func (d *Duration) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

func (d *Duration) Type() string { return "duration" }

// MarshalYAML writes a Duration as "500ms", the way it is read.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }
