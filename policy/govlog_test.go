package policy

import (
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestGovernorLinesNameTheSession: a governor makes its logger at its
// first line, not before (most sessions log nothing), and each of its
// lines names its session.
func TestGovernorLinesNameTheSession(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	e, err := New(Options{Policy: Defaults(), Audit: Audit{Path: "off"}, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown()
	g := newGovernor(e, "s3", nil)
	defer g.Close()
	if g.lg.Load() != nil {
		t.Fatal("the governor made its logger before its first line")
	}
	g.log().Info("one")
	g.log().Info("two")
	if n := logs.Len(); n != 2 {
		t.Fatalf("%d lines, want 2", n)
	}
	for _, l := range logs.All() {
		if s := l.ContextMap()["session"]; s != "s3" {
			t.Errorf("line %q: session %v, want s3", l.Message, s)
		}
	}
}
