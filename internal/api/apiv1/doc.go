// Package apiv1 owns the controller API's wire format: the request and
// response bodies, the SSE event data and the header names with their
// checks. The server (internal/api), the CLI and the tests share it, so a
// client needs none of the server's dependencies to speak the API.
package apiv1
