package guest

import "strings"

// QuoteList renders strings as a list of quoted strings, for reasons.
func QuoteList(ss []string) string {
	var sb strings.Builder
	sb.WriteByte('[')
	for i, s := range ss {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(Quote(s))
	}
	sb.WriteByte(']')
	return sb.String()
}

// Quote puts s in double quotes, escaping quotes, backslashes and ASCII control characters so
// that odd values stay visible in a reason. It does what strconv.Quote does for the cases that matter
// here without linking strconv's Unicode tables (about 20 KB) into the module.
func Quote(s string) string {
	const hex = "0123456789abcdef"
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c == 0x7f:
			b = append(b, '\\', 'x', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return string(append(b, '"'))
}
