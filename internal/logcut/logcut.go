// Package logcut cuts long identifiers in log lines and events. A request
// id, a progress token or a task id is its peer's to choose, up to the
// frame limit: a 1 MiB id made 1 MiB log lines, once for each decision
// about its request. An Encoder writes at most Max bytes of each, and
// says how long it was.
package logcut

import (
	"fmt"
	"strconv"

	"go.uber.org/zap"
	"go.uber.org/zap/buffer"
	"go.uber.org/zap/zapcore"
)

// Max is how many bytes of an identifier a log line keeps.
const Max = 128

// Keys are the fields that hold identifiers a peer chose.
var Keys = map[string]bool{"id": true, "upstream_id": true, "token": true, "upstream_token": true,
	"joined": true, "task": true, "session_id": true}

// Encoder returns enc cutting the identifiers (Keys) of every entry and of
// the context fields added to it.
func Encoder(enc zapcore.Encoder) zapcore.Encoder { return cutting{enc} }

type cutting struct{ zapcore.Encoder }

func (c cutting) Clone() zapcore.Encoder { return cutting{c.Encoder.Clone()} }

func (c cutting) AddString(key, v string) {
	if Keys[key] {
		v = Cut(v)
	}
	c.Encoder.AddString(key, v)
}

func (c cutting) AddByteString(key string, v []byte) {
	if Keys[key] && len(v) > Max {
		c.Encoder.AddString(key, Cut(string(v)))
		return
	}
	c.Encoder.AddByteString(key, v)
}

func (c cutting) EncodeEntry(e zapcore.Entry, fields []zapcore.Field) (*buffer.Buffer, error) {
	copied := false
	for i, f := range fields {
		if !Keys[f.Key] {
			continue
		}
		if cut, ok := cutField(f); ok {
			if !copied { // the caller's, which other cores of a tee read too
				fields, copied = append([]zapcore.Field(nil), fields...), true
			}
			fields[i] = cut
		}
	}
	return c.Encoder.EncodeEntry(e, fields)
}

// cutField returns f cut, and true, if f holds an identifier over Max.
func cutField(f zapcore.Field) (zapcore.Field, bool) {
	var s string
	switch f.Type {
	case zapcore.StringType:
		s = f.String
	case zapcore.ByteStringType:
		s = string(f.Interface.([]byte))
	case zapcore.StringerType:
		st, ok := f.Interface.(fmt.Stringer)
		if !ok {
			return f, false
		}
		s = st.String()
	default:
		return f, false
	}
	if len(s) <= Max {
		return f, false
	}
	return zap.String(f.Key, Cut(s)), true
}

// Cut returns s, or its first Max bytes and how long it was.
func Cut(s string) string {
	if len(s) <= Max {
		return s
	}
	return s[:Max] + "…(" + strconv.Itoa(len(s)) + " bytes)"
}
