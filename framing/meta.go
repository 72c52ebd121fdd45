package framing

import (
	"bytes"
	"errors"
)

// Fields the proxy sets in a request's params._meta are spliced in: every
// other byte of the request (its id, method and arguments) goes as its
// sender wrote it.

// ErrMetaNotObject reports a request whose params or params._meta is
// neither an object nor null: nothing can be added to it.
var ErrMetaNotObject = errors.New("params or _meta is not an object")

// splice replaces raw[span] by text; an empty span inserts text there.
type splice struct {
	span Span
	text []byte
}

// applySplices appends raw to dst with the splices, in order and not
// overlapping, applied.
func applySplices(dst, raw []byte, ss ...splice) []byte {
	at := 0
	for _, s := range ss {
		dst = append(dst, raw[at:s.span.Start]...)
		dst = append(dst, s.text...)
		at = s.span.End
	}
	return append(dst, raw[at:]...)
}

// metaInsert returns the splice that adds members (`"key":value` pairs,
// comma-separated) first in m's params._meta, making params or _meta where
// they are absent or null.
func metaInsert(m *Message, members []byte) (splice, error) {
	raw, params, meta := m.Raw, m.ParamsSpan, m.MetaSpan
	wrap := func(pre string, post string) []byte {
		b := make([]byte, 0, len(pre)+len(members)+len(post))
		return append(append(append(b, pre...), members...), post...)
	}
	switch {
	case !params.Found(): // before the envelope's closing brace
		end := len(raw) - 1
		return splice{Span{end, end}, wrap(`,"params":{"_meta":{`, `}}`)}, nil
	case isNull(raw, params):
		return splice{params, wrap(`{"_meta":{`, `}}`)}, nil
	case raw[params.Start] != '{':
		return splice{}, ErrMetaNotObject
	case !meta.Found(): // first in params
		at := params.Start + 1
		post := "}"
		if !isEmptyObject(raw, params) {
			post = "},"
		}
		return splice{Span{at, at}, wrap(`"_meta":{`, post)}, nil
	case isNull(raw, meta):
		return splice{meta, wrap(`{`, `}`)}, nil
	case raw[meta.Start] != '{':
		return splice{}, ErrMetaNotObject
	}
	at := meta.Start + 1
	post := ""
	if !isEmptyObject(raw, meta) {
		post = ","
	}
	return splice{Span{at, at}, wrap("", post)}, nil
}

// AddMeta returns the bytes of request m with members (`"key":value`
// pairs, comma-separated) first in its params._meta. Params or _meta that
// are not objects (nor null) are an error.
func AddMeta(m *Message, members []byte) ([]byte, error) {
	s, err := metaInsert(m, members)
	if err != nil {
		return nil, err
	}
	return applySplices(make([]byte, 0, len(m.Raw)+len(s.text)), m.Raw, s), nil
}

// WithTraceContext returns the bytes of request m with the W3C trace
// context in its params._meta: traceparent, and tracestate unless empty.
// A key the _meta already has gets its value replaced; the others are
// added.
func WithTraceContext(m *Message, parent, state string) ([]byte, error) {
	var ss [2]splice
	n := 0
	var members []byte
	set := func(key, value string, at Span) {
		if value == "" && !at.Found() {
			return
		}
		v := StringID(value).AppendJSON(nil)
		if at.Found() {
			ss[n], n = splice{at, v}, n+1
			return
		}
		if len(members) > 0 {
			members = append(members, ',')
		}
		members = append(append(append(members, '"'), key...), `":`...)
		members = append(members, v...)
	}
	set("traceparent", parent, m.TraceParentSpan)
	set("tracestate", state, m.TraceStateSpan)
	out := ss[:n]
	if len(members) > 0 {
		ins, err := metaInsert(m, members)
		if err != nil {
			return nil, err
		}
		out = append(out, ins)
	}
	if len(out) == 2 && out[1].span.Start < out[0].span.Start { // at most two: each key is replaced or added
		out[0], out[1] = out[1], out[0]
	}
	return applySplices(make([]byte, 0, len(m.Raw)+80), m.Raw, out...), nil
}

// TraceContext returns the traceparent and tracestate of m's params._meta,
// where they are strings.
func (m *Message) TraceContext() (parent, state string) {
	return m.metaString(m.TraceParentSpan), m.metaString(m.TraceStateSpan)
}

// metaString is the string at span, or "" if there is none.
func (m *Message) metaString(span Span) string {
	if !span.Found() || m.Raw[span.Start] != '"' {
		return ""
	}
	s, _ := unquote(m.Raw[span.Start:span.End])
	return s
}

// isNull reports whether the value at span is null.
func isNull(raw []byte, span Span) bool { return string(raw[span.Start:span.End]) == "null" }

// isEmptyObject reports whether the object at span has no members.
func isEmptyObject(raw []byte, span Span) bool {
	return len(bytes.TrimSpace(raw[span.Start+1:span.End-1])) == 0
}
