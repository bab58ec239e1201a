// Package live owns the live view of a running pod's log (R-C8): one upstream
// follow stream per pod however many viewers, fanned out to each viewer
// through a bounded buffer. A viewer that cannot keep up is dropped with
// ErrSlowViewer instead of slowing the others; a transient upstream error is
// healed by reconnecting from the last timestamp and dropping the lines that
// were already delivered, so no line is lost or repeated; the upstream is
// closed when the pod ends or the last viewer leaves.
//
// Lines are numbered from 1 in the order of the pod's log. The number is the
// line's identity for resumption (SSE Last-Event-ID): the same log read from
// its start — live, after a reconnect, or as the stored log artifact once the
// pod is gone — numbers every line the same way.
package live
