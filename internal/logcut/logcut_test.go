package logcut

import (
	"bytes"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
)

// TestLongIdentifiersAreCut: a 1 MiB request id or token, in an entry's
// fields or its logger's context, is written as its first Max bytes and
// its length; other fields, and short ids, are written whole. Before, a
// 1 MiB id made a 1 MiB line for each decision about its request.
func TestLongIdentifiersAreCut(t *testing.T) {
	long := strings.Repeat("x", 1<<20)
	var out bytes.Buffer
	enc := Encoder(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()))
	log := zap.New(zapcore.NewCore(enc, zapcore.AddSync(&out), zapcore.DebugLevel))
	fields := []zap.Field{zap.Stringer("id", framing.StringID(long)), zap.String("token", long), zap.ByteString("upstream_id", []byte(long)),
		zap.String("reason", "kept whole"), zap.String("task", "t1")}
	log.With(zap.String("session_id", long)).Info("decided", fields...)
	line := out.String()
	if len(line) > 4*Max+1000 {
		t.Errorf("a line of %d bytes", len(line))
	}
	if strings.Count(line, " bytes)") != 4 {
		t.Errorf("the ids are not cut with their length: %.600s", line)
	}
	if !strings.Contains(line, `"reason":"kept whole"`) || !strings.Contains(line, `"task":"t1"`) {
		t.Errorf("other fields changed: %.600s", line)
	}
	if fields[1].String != long {
		t.Error("the caller's fields were changed")
	}
}
