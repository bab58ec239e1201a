package api

import (
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"

	"crucible.dev/crucible/internal/store"
)

// maxContinueBytes bounds a continue token; a real one is under 100 bytes.
const maxContinueBytes = 512

var errBadContinue = errors.New("malformed continue token")

// encodeContinue makes the opaque token of a cursor: the last row's creation
// time (unix nanoseconds) and id.
func encodeContinue(c store.Cursor) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.CreatedAt.UnixNano(), 10) + "/" + c.ID))
}

func decodeContinue(tok string) (store.Cursor, error) {
	if len(tok) > maxContinueBytes {
		return store.Cursor{}, errBadContinue
	}
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return store.Cursor{}, errBadContinue
	}
	ns, id, ok := strings.Cut(string(raw), "/")
	if !ok || id == "" {
		return store.Cursor{}, errBadContinue
	}
	n, err := strconv.ParseInt(ns, 10, 64)
	if err != nil || n < 0 {
		return store.Cursor{}, errBadContinue
	}
	return store.Cursor{CreatedAt: time.Unix(0, n).UTC(), ID: id}, nil
}
