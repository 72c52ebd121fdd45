package proxy

import (
	"bytes"
	"encoding/json"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
)

// A task-augmented request (2025-11-25) answered with a CreateTaskResult
// keeps its progress token until its task is terminal (progress.mdx: "the
// original token stays valid until the task is terminal"): the tracker
// learns that a task ended from an answer to tasks/get, tasks/cancel or
// tasks/result, or from notifications/tasks/status. These messages are
// rare, so they are read with encoding/json, not the frame scanner.

// relatedTaskKey is the _meta key that ties a message to a task.
const relatedTaskKey = "io.modelcontextprotocol/related-task"

// terminal reports whether a task status is terminal.
func terminal(status string) bool {
	return status == "completed" || status == "failed" || status == "cancelled"
}

// taskCreated returns what a response says of the task it created, nil if
// it is no CreateTaskResult.
func taskCreated(m *framing.Message) *TaskAnswer {
	if m.TaskID == "" {
		return nil
	}
	var r struct {
		Result struct {
			Task struct {
				TTL *float64 `json:"ttl"`
			} `json:"task"`
		} `json:"result"`
	}
	a := &TaskAnswer{ID: m.TaskID}
	if json.Unmarshal(m.Raw, &r) == nil && r.Result.Task.TTL != nil && *r.Result.Task.TTL > 0 {
		a.TTL = time.Duration(*r.Result.Task.TTL * float64(time.Millisecond))
	}
	return a
}

// taskOver returns the id of the task that an answer to method (a request
// of the tasks/ family) says is terminal, or "".
func taskOver(method string, m *framing.Message) string {
	switch method {
	case "tasks/get", "tasks/cancel":
		var r struct {
			Result struct {
				TaskID string `json:"taskId"`
				Status string `json:"status"`
			} `json:"result"`
		}
		if json.Unmarshal(m.Raw, &r) == nil && terminal(r.Result.Status) {
			return r.Result.TaskID
		}
	case "tasks/result": // answered only once the task is terminal
		var r struct {
			Result struct {
				Meta map[string]struct {
					TaskID string `json:"taskId"`
				} `json:"_meta"`
			} `json:"result"`
		}
		if json.Unmarshal(m.Raw, &r) == nil {
			return r.Result.Meta[relatedTaskKey].TaskID
		}
	}
	return ""
}

// taskStatusOver returns the id of the task a notifications/tasks/status
// says is terminal, or "".
func taskStatusOver(m *framing.Message) string {
	var r struct {
		Params struct {
			TaskID string `json:"taskId"`
			Status string `json:"status"`
		} `json:"params"`
	}
	if json.Unmarshal(m.Raw, &r) == nil && terminal(r.Params.Status) {
		return r.Params.TaskID
	}
	return ""
}

// relatedTaskBytes is relatedTaskKey, for a look at a message's bytes
// before it is parsed.
var relatedTaskBytes = []byte(relatedTaskKey)

// relatedTask returns the id of the task a message's params._meta ties it
// to, or "".
func relatedTask(m *framing.Message) string {
	if !bytes.Contains(m.Raw, relatedTaskBytes) {
		return ""
	}
	var r struct {
		Params struct {
			Meta map[string]struct {
				TaskID string `json:"taskId"`
			} `json:"_meta"`
		} `json:"params"`
	}
	if json.Unmarshal(m.Raw, &r) != nil {
		return ""
	}
	return r.Params.Meta[relatedTaskKey].TaskID
}

// afterTask reports whether a notification from a peer is tied to a task
// of the peer's that has ended: its issuer must hear nothing more of it.
func (t *Tracker) afterTask(from Peer, m *framing.Message) bool {
	id := relatedTask(m)
	if id == "" || !t.peers[from].answers.taskIsOver(id) {
		return false
	}
	t.silenced(from, t.peers[from].answers.dir, m, framing.StringID(id), "a message about a task that has ended")
	return true
}

// endTask forgets the progress token kept for a task of the issuer that
// from answers, once a message says the task is terminal.
func (t *Tracker) endTask(from Peer, id string) {
	if id != "" && t.peers[from].answers.taskEnded(id) {
		t.log(from, zapcore.DebugLevel, "task ended: progress under its request's token ends too", zap.String("task", id))
	}
}
