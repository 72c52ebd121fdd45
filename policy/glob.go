package policy

import (
	"fmt"
	"regexp"
	"strings"
)

// A glob matches tool names and methods. Unlike path.Match, its * matches
// any run of characters, / included: tool names may hold a / (SEP-986), and
// method: "*" must match tools/call. ? matches one character, [abc] and
// [a-z] one of a set ([!abc] or [^abc] one outside it), and \ makes the
// next character literal.
type glob struct {
	text    string
	literal bool           // no wildcard: text is matched as it is
	prefix  string         // for globs of the form "prefix*"
	re      *regexp.Regexp // for the rest
}

// compileGlob compiles a glob, or says what is wrong with it.
func compileGlob(text string) (*glob, error) {
	g := &glob{text: text}
	if !strings.ContainsAny(text, `*?[\`) {
		g.literal = true
		return g, nil
	}
	if p, ok := strings.CutSuffix(text, "*"); ok && !strings.ContainsAny(p, `*?[\`) {
		g.prefix = p
		return g, nil
	}
	var b strings.Builder
	b.WriteString(`(?s)^`)
	for i := 0; i < len(text); i++ {
		switch c := text[i]; c {
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		case '\\':
			if i+1 == len(text) {
				return nil, fmt.Errorf("%q ends with a lone \\", text)
			}
			i++
			b.WriteString(regexp.QuoteMeta(text[i : i+1]))
		case '[':
			end := strings.IndexByte(text[i+1:], ']')
			if end < 0 {
				return nil, fmt.Errorf("%q has a [ without its ]", text)
			}
			class := text[i+1 : i+1+end]
			if strings.HasPrefix(class, "!") {
				class = "^" + class[1:]
			}
			if class == "" || class == "^" {
				return nil, fmt.Errorf("%q has an empty [ ]", text)
			}
			b.WriteString("[" + strings.ReplaceAll(class, `\`, `\\`) + "]")
			i += end + 1
		default:
			b.WriteString(regexp.QuoteMeta(text[i : i+1]))
		}
	}
	b.WriteString(`$`)
	re, err := regexp.Compile(b.String())
	if err != nil {
		return nil, fmt.Errorf("%q is not a valid glob: %v", text, err)
	}
	g.re = re
	return g, nil
}

// match reports whether s matches the glob.
func (g *glob) match(s string) bool {
	switch {
	case g.literal:
		return s == g.text
	case g.re == nil:
		return strings.HasPrefix(s, g.prefix)
	}
	return g.re.MatchString(s)
}

// covers reports whether every name the other glob matches, this one
// matches too, as far as can be told without solving the general case:
// the same glob, a literal this one matches, or a prefix this one's
// prefix starts.
func (g *glob) covers(other *glob) bool {
	switch {
	case g.text == other.text:
		return true
	case other.literal:
		return g.match(other.text)
	case other.re == nil && g.re == nil && !g.literal:
		return strings.HasPrefix(other.prefix, g.prefix)
	}
	return false
}
