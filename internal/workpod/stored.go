package workpod

import (
	"encoding/json"
	"fmt"
)

// stored is what a work pod's row keeps of it: the rendered pod with the
// secret files' values replaced by their keyed digests (Digest). The values live
// only in the Secret on the spoke and in the submitter's request; nothing
// reads them back from the store. So a pod without secret files can be
// dispatched again from its row alone (a submit cut before its dispatch),
// and one with them only by a replay of the request that carried them.
type stored struct {
	WorkPod
	SecretFiles   map[string]string `json:"secret_files,omitempty"` // always empty: shadows the embedded field
	SecretDigests map[string]string `json:"secret_digests,omitempty"`
}

// EncodeStored is w as its row stores it (see stored), its secret files
// digested under key, the installation's digest key.
func EncodeStored(w WorkPod, key []byte) ([]byte, error) {
	st := stored{WorkPod: w}
	for k, v := range w.SecretFiles {
		if st.SecretDigests == nil {
			st.SecretDigests = map[string]string{}
		}
		st.SecretDigests[k] = Digest(key, []byte(v))
	}
	return json.Marshal(st)
}

// DecodeStored is the work pod a row's spec keeps, without secret files,
// and the names of the secret files it had: a caller that would dispatch it
// again must have their values from elsewhere, or not dispatch it.
func DecodeStored(spec []byte) (w WorkPod, secretFiles []string, err error) {
	var st stored
	if err := json.Unmarshal(spec, &st); err != nil {
		return WorkPod{}, nil, fmt.Errorf("decode stored work pod: %w", err)
	}
	for k := range st.SecretDigests {
		secretFiles = append(secretFiles, k)
	}
	return st.WorkPod, secretFiles, nil
}
