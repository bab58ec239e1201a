package lru

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"sync"
)

// tokenKeySecret keys TokenKey; drawn once per process.
var tokenKeySecret = func() []byte {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux; it panics rather than return short
	return b
}()

// TokenKey is the cache key of a bearer token: the hex HMAC-SHA256 of it
// under a key drawn at process start, as k8s.io/apiserver keys its token
// cache. A plain SHA-256 is the same in every process and forever: one read
// from a heap dump or a debug log could be checked offline against candidate
// tokens, and matched across replicas. The webhook, the drop-box and the
// API's authentication all key their caches with it; its first twelve
// characters identify a token in logs, where the token itself never goes.
func TokenKey(token string) string {
	m := tokenMACs.Get().(hash.Hash)
	m.Reset()
	m.Write([]byte(token))
	var sum [sha256.Size]byte
	var out [2 * sha256.Size]byte
	hex.Encode(out[:], m.Sum(sum[:0]))
	tokenMACs.Put(m)
	return string(out[:])
}

// tokenMACs are keyed HMACs to reuse: Reset puts one back at its keyed
// state, where hmac.New would hash the key's pads again (a third of a
// key's cost for a short token).
var tokenMACs = sync.Pool{New: func() any { return hmac.New(sha256.New, tokenKeySecret) }}
