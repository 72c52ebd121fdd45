package framing

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// maxDepth bounds nesting so that hostile input cannot grow the scanner's
// stack without limit. encoding/json uses 10000.
const maxDepth = 10000

// A SyntaxError reports malformed JSON at a byte offset of the frame.
type SyntaxError struct {
	Offset int
	msg    string
}

// Error implements error.
func (e *SyntaxError) Error() string {
	return fmt.Sprintf("invalid JSON at offset %d: %s", e.Offset, e.msg)
}

var errDepth = errors.New("nesting too deep")

// scanner validates JSON in one pass. It keeps the open brackets in a
// stack: the innermost 64 levels' kinds as bits of a word (a frame as MCP
// has them never needs more, and costs no allocation), deeper ones in a
// slice reused between frames.
type scanner struct {
	data  []byte
	pos   int
	depth int    // brackets open
	bits  uint64 // bit i set: level i (from 0, outermost) is an array
	deep  []byte // the brackets of levels 64 and deeper
}

// push opens a bracket, c.
func (s *scanner) push(c byte) {
	if s.depth < 64 {
		s.bits &^= 1 << s.depth
		if c == '[' {
			s.bits |= 1 << s.depth
		}
	} else {
		s.deep = append(s.deep, c)
	}
	s.depth++
}

// top returns the innermost open bracket; there must be one.
func (s *scanner) top() byte {
	if d := s.depth - 1; d >= 64 {
		return s.deep[d-64]
	} else if s.bits&(1<<d) != 0 {
		return '['
	}
	return '{'
}

// popTo closes brackets down to depth.
func (s *scanner) popTo(depth int) {
	s.depth = depth
	if len(s.deep) > 0 {
		s.deep = s.deep[:max(0, depth-64)]
	}
}

func (s *scanner) fail(msg string) error { return &SyntaxError{Offset: s.pos, msg: msg} }

func (s *scanner) ws() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, or 0 at the end.
func (s *scanner) peek() byte {
	s.ws()
	if s.pos < len(s.data) {
		return s.data[s.pos]
	}
	return 0
}

func (s *scanner) expect(c byte) error {
	if s.peek() != c {
		return s.fail(fmt.Sprintf("expected %q", c))
	}
	s.pos++
	return nil
}

// str scans a string literal starting at s.pos and returns its span,
// quotes included, and whether it holds escapes.
func (s *scanner) str() (span Span, escaped bool, err error) {
	start := s.pos
	if s.peek() != '"' {
		return Span{}, false, s.fail("expected string")
	}
	start = s.pos
	i := s.pos + 1
	for i < len(s.data) {
		i = plainRun(s.data, i)
		if i >= len(s.data) {
			break
		}
		c := s.data[i]
		switch {
		case c == '"':
			s.pos = i + 1
			return Span{start, s.pos}, escaped, nil
		case c == '\\':
			escaped = true
			if n := escapeLen(s.data[i:]); n > 0 {
				i += n
				continue
			}
			s.pos = i
			return Span{}, false, s.fail("invalid escape")
		case c < 0x20:
			s.pos = i
			return Span{}, false, s.fail("control character in string")
		}
		i++
	}
	s.pos = len(s.data)
	return Span{}, false, s.fail("unterminated string")
}

// escapeLen returns the length of the escape sequence at the start of b, or 0.
func escapeLen(b []byte) int {
	if len(b) < 2 {
		return 0
	}
	switch b[1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return 2
	case 'u':
		if len(b) < 6 {
			return 0
		}
		for _, h := range b[2:6] {
			if !isHex(h) {
				return 0
			}
		}
		return 6
	}
	return 0
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// number scans a JSON number per RFC 8259 §6.
func (s *scanner) number() error {
	d, i := s.data, s.pos
	if i < len(d) && d[i] == '-' {
		i++
	}
	ok := true
	if i < len(d) && d[i] == '0' {
		i++
	} else {
		i, ok = digits(d, i)
	}
	if ok && i < len(d) && d[i] == '.' {
		i, ok = digits(d, i+1)
	}
	if ok && i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		i, ok = digits(d, i)
	}
	s.pos = i
	if !ok {
		return s.fail("invalid number")
	}
	return nil
}

// digits skips a run of one or more digits at d[i:], reporting false if
// there is none.
func digits(d []byte, i int) (int, bool) {
	start := i
	for i < len(d) && isDigit(d[i]) {
		i++
	}
	return i, i > start
}

func (s *scanner) literal(word string) error {
	if len(s.data)-s.pos < len(word) || string(s.data[s.pos:s.pos+len(word)]) != word {
		return s.fail("invalid literal")
	}
	s.pos += len(word)
	return nil
}

// scalar scans one string, number or literal.
func (s *scanner) scalar() error {
	switch c := s.peek(); {
	case c == '"':
		_, _, err := s.str()
		return err
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || isDigit(c):
		return s.number()
	case c == 0:
		return s.fail("unexpected end of input")
	}
	return s.fail("invalid character")
}

// value scans one JSON value of any kind and returns its span. It iterates
// rather than recursing, with an explicit stack of open brackets.
func (s *scanner) value() (Span, error) {
	start := s.pos
	base := s.depth
	defer s.popTo(base)
	s.ws()
	start = s.pos
	for {
		if err := s.open(); err != nil {
			return Span{}, err
		}
		// Close what can be closed; stop when back at the starting depth.
		for {
			if s.depth == base {
				return Span{start, s.pos}, nil
			}
			more, err := s.next()
			if err != nil {
				return Span{}, err
			}
			if more {
				break
			}
		}
	}
}

// open scans a scalar, an empty container, or the opening of a container
// (pushing it and consuming up to its first value).
func (s *scanner) open() error {
	for {
		c := s.peek()
		if c != '{' && c != '[' {
			return s.scalar()
		}
		s.pos++
		closer := byte('}')
		if c == '[' {
			closer = ']'
		}
		if s.peek() == closer {
			s.pos++
			return nil
		}
		if s.depth >= maxDepth {
			return errDepth
		}
		s.push(c)
		if c == '{' {
			if err := s.key(); err != nil {
				return err
			}
		}
	}
}

// key scans `"name" :` inside an object.
func (s *scanner) key() error {
	if _, _, err := s.str(); err != nil {
		return err
	}
	return s.expect(':')
}

// next consumes a ',' (and the following key) or a closing bracket after a
// value inside the innermost open container. It reports whether another
// value follows.
func (s *scanner) next() (bool, error) {
	top := s.top()
	switch c := s.peek(); {
	case c == ',':
		s.pos++
		if top == '{' {
			return true, s.key()
		}
		return true, nil
	case (top == '{' && c == '}') || (top == '[' && c == ']'):
		s.pos++
		s.popTo(s.depth - 1)
		return false, nil
	}
	return false, s.fail("expected ',' or closing bracket")
}

// fields calls f for each member of the object at s.pos, with the key's span
// (quotes included) and whether it has escapes. f must consume the value.
// It reports false, without consuming anything, when the next value is not an object.
func (s *scanner) fields(f func(key Span, escaped bool) error) (bool, error) {
	if s.peek() != '{' {
		return false, nil
	}
	s.pos++
	if s.peek() == '}' {
		s.pos++
		return true, nil
	}
	for {
		k, esc, err := s.str()
		if err != nil {
			return true, err
		}
		if err := s.expect(':'); err != nil {
			return true, err
		}
		s.ws()
		if err := f(k, esc); err != nil {
			return true, err
		}
		switch s.peek() {
		case ',':
			s.pos++
			s.ws()
		case '}':
			s.pos++
			return true, nil
		default:
			return true, s.fail("expected ',' or '}'")
		}
	}
}

// skip consumes one value.
func (s *scanner) skip() error {
	_, err := s.value()
	return err
}

// Word-at-a-time masks (see "Bit Twiddling Hacks", "Determine if a word has
// a byte less than n"): a high bit is set in each byte lane that may hold the
// byte looked for; lanes are then checked one by one.
const (
	lo8   = 0x0101010101010101
	hi8   = 0x8080808080808080
	quote = '"' * lo8
	bslsh = '\\' * lo8
	ctl   = 0x20 * lo8
)

// plainRun returns the index of the first byte at or after i that needs a
// look in a string: a quote, a backslash or a control character. It tests
// eight bytes at a time, which is what makes classifying a large tool
// result cost little more than copying it.
func plainRun(d []byte, i int) int {
	for ; i+8 <= len(d); i += 8 {
		v := binary.LittleEndian.Uint64(d[i:])
		q, b := v^quote, v^bslsh
		if ((q-lo8)&^q|(b-lo8)&^b|(v-ctl)&^v)&hi8 != 0 {
			break
		}
	}
	for ; i < len(d); i++ {
		if c := d[i]; c == '"' || c == '\\' || c < 0x20 {
			return i
		}
	}
	return i
}
