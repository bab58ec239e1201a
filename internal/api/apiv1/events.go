package apiv1

import "crucible.dev/crucible/internal/store"

// LineEvent is the data of an SSE `line` event. TS is empty when a finished
// pod's stored log is replayed (it is stored without timestamps).
type LineEvent struct {
	TS   string `json:"ts,omitempty"`
	Text string `json:"text"`
}

// EndEvent is the data of the SSE `end` event: how the work pod ended.
type EndEvent struct {
	State    store.State `json:"state"`
	ExitCode *int32      `json:"exit_code,omitempty"`
	Reason   string      `json:"reason,omitempty"`
}

// ErrorEvent is the data of an SSE `error` event, the stream's last.
type ErrorEvent struct {
	Error string `json:"error"`
}
