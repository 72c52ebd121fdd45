package main

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/config"
)

// TestLogLinesUseTheAuditNames: a JSON log line's time is "time", as in the
// audit trail, and durations carry their unit.
func TestLogLinesUseTheAuditNames(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	newLogger(config.Log{Level: "info", Format: "json"}, &buf, nil).Info("x", zap.Duration("wait", 1500*time.Millisecond))
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("%s: %v", buf.Bytes(), err)
	}
	if _, ok := line["time"]; !ok || line["ts"] != nil || line["wait"] != "1.5s" {
		t.Errorf("log line %s: want a time field and wait 1.5s", buf.Bytes())
	}
}
