package apiv1

// Rights is what a caller may do with the work pods of one cluster (or of
// every cluster). The web UI hides what is false; the API still decides
// every request on its own.
type Rights struct {
	Create    bool `json:"create"`
	List      bool `json:"list"`
	Get       bool `json:"get"`
	Delete    bool `json:"delete"`
	Log       bool `json:"log"`
	Artifacts bool `json:"artifacts"`
}

// WhoAmI is the answer of GET /api/whoami.
type WhoAmI struct {
	User string `json:"user"`
	// Auth is the API's mode: none, kubernetes or proxy.
	Auth string `json:"auth"`
	// All is what the caller may do across every cluster (resource name "").
	All Rights `json:"all"`
	// Clusters is per cluster, by name.
	Clusters map[string]Rights `json:"clusters"`
}
