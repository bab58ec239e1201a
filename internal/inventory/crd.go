package inventory

import _ "embed"

// CRD is the ClusterProfile CustomResourceDefinition of the
// cluster-inventory-api version crucible builds with (go.mod), the one
// file of sigs.k8s.io/cluster-inventory-api's config/crd/bases, kept here
// so that `crucible dev up` and the tests can serve ClusterProfiles on a
// hub that has no cluster manager; a test holds it to the module's copy.
//
//go:embed multicluster.x-k8s.io_clusterprofiles.yaml
var CRD []byte
