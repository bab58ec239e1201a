package devstack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	cpv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
	cpclient "sigs.k8s.io/cluster-inventory-api/client/clientset/versioned"
	"sigs.k8s.io/yaml"

	"crucible.dev/crucible/internal/inventory"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/render"
)

// A fleet from ClusterProfiles on the dev hub (issue 42): with
// Options.ClusterProfiles the hub serves the ClusterProfile CRD, the
// controller may read ClusterProfiles in that namespace and ask the hub for
// its spoke tokens (`render hub --token-request --cluster-profiles`), and
// its profile's [fleet] reads them. A spoke is then added by publishing its
// ClusterProfile (PublishClusterProfile), as a cluster manager would,
// rather than by a profile entry: Options.Spokes with Unlisted.

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// serveClusterProfiles prepares the hub for Options.ClusterProfiles.
func (s *Stack) serveClusterProfiles(ctx context.Context) error {
	ns := s.opts.ClusterProfiles
	if ns == "" {
		return nil
	}
	hub, err := dynamic.NewForConfig(s.Hub.Admin)
	if err != nil {
		return err
	}
	if err := InstallClusterProfileCRD(ctx, hub); err != nil {
		return err
	}
	if _, err := s.Hub.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the ClusterProfiles' namespace %s: %w", ns, err)
	}
	objs := append(render.HubClusterProfilesRBAC(ns, HubNamespace, HubServiceAccount), render.HubTokenRequestRBAC(HubNamespace, HubServiceAccount)...)
	for _, obj := range objs {
		if err := createObject(ctx, s.Hub, obj); err != nil {
			return fmt.Errorf("grant the controller the ClusterProfiles: %w", err)
		}
	}
	if s.opts.ClusterProfilePins {
		if err := s.writeServerPins(); err != nil {
			return err
		}
	}
	s.opts.Progress("hub serves ClusterProfiles in %s to the controller", ns)
	return nil
}

// InstallClusterProfileCRD creates the ClusterProfile CRD (inventory.CRD)
// on hub, unless it is there already, and waits until it is served.
func InstallClusterProfileCRD(ctx context.Context, hub dynamic.Interface) error {
	var crd unstructured.Unstructured
	if err := yaml.Unmarshal(inventory.CRD, &crd.Object); err != nil {
		return fmt.Errorf("the ClusterProfile CRD: %w", err)
	}
	if _, err := hub.Resource(crdResource).Create(ctx, &crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the ClusterProfile CRD: %w", err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, startTimeout, true, func(ctx context.Context) (bool, error) {
		got, err := hub.Resource(crdResource).Get(ctx, crd.GetName(), metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("the ClusterProfile CRD is not established: %w", err)
	}
	return nil
}

// serverPinsFile is where Options.ClusterProfilePins writes the pins.
func (s *Stack) serverPinsFile() string { return filepath.Join(s.Dir, "crucible", "server-pins.json") }

// writeServerPins pins every spoke to its server and the stack's CA.
func (s *Stack) writeServerPins() error {
	ca, err := os.ReadFile(s.CAFile)
	if err != nil {
		return err
	}
	var clusters []render.AccessCluster
	for _, c := range s.Spokes {
		clusters = append(clusters, render.AccessCluster{Name: c.Name, Server: c.Server, CAPEM: ca})
	}
	data, err := render.ServerPinsFile(clusters)
	if err != nil {
		return err
	}
	return os.WriteFile(s.serverPinsFile(), data, 0o644)
}

// fleetSection is the profile's [fleet] for Options.ClusterProfiles: every
// spoke a ClusterProfile makes is one of the stack's, pushing to
// ingestURL, with capacity, and without the GPU classes (a test that
// publishes a GPU spoke sets them itself).
func (s *Stack) fleetSection(ingestURL string) string {
	if s.opts.ClusterProfiles == "" {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n[fleet]\ncluster_profiles = %q\n", s.opts.ClusterProfiles)
	if s.opts.ClusterProfileSelector != "" {
		fmt.Fprintf(&b, "cluster_profile_selector = %q\n", s.opts.ClusterProfileSelector)
	}
	if s.opts.ClusterProfilePins {
		fmt.Fprintf(&b, "server_pins = %q\n", s.serverPinsFile())
	}
	fmt.Fprintf(&b, "[fleet.cluster_defaults]\nloop_namespace = %q\nturn_service_account = %q\ningest_url = %q\ningest_audience = %q\ncapacity = true\n",
		SpokeNamespace, SpokeServiceAccount, ingestURL, IngestAudience)
	b.WriteString("[fleet.cluster_defaults.classes.gpu]\nwithhold = true\n[fleet.cluster_defaults.classes.gpu-short]\nwithhold = true\n")
	return b.String()
}

// ClusterProfiles is a client of the hub's ClusterProfiles, as the cluster
// manager that publishes them.
func (s *Stack) ClusterProfiles() (cpclient.Interface, error) {
	return cpclient.NewForConfig(s.Hub.Admin)
}

// ClusterProfile is spoke c's ClusterProfile in namespace, as `crucible
// render clusterprofile` writes it: its server and the stack's CA under
// crucible's access provider, and a shared server's spoke's loop namespace
// as the crucible.dev/loop-namespace property.
func (s *Stack) ClusterProfile(c *Cluster, namespace string) (*cpv1alpha1.ClusterProfile, error) {
	ca, err := os.ReadFile(s.CAFile)
	if err != nil {
		return nil, err
	}
	cp, err := render.ClusterProfile(render.AccessCluster{Name: c.Name, Server: c.Server, CAPEM: ca},
		render.ProfileOptions{Namespace: namespace, Provider: render.AccessProviderName, ClusterManager: render.ClusterManagerName})
	if err != nil {
		return nil, err
	}
	if c.LoopNamespace != "" && c.LoopNamespace != SpokeNamespace { // a shared server's spoke (guests.go)
		cp.Status.Properties = append(cp.Status.Properties, cpv1alpha1.Property{Name: profile.PropertyLoopNamespace, Value: c.LoopNamespace})
	}
	return cp, nil
}

// PublishClusterProfile creates cp on the hub, or updates the one of its
// name, and then writes its status (a subresource: a create drops it), as a
// cluster manager publishes a cluster.
func (s *Stack) PublishClusterProfile(ctx context.Context, cp *cpv1alpha1.ClusterProfile) error {
	client, err := s.ClusterProfiles()
	if err != nil {
		return err
	}
	profiles := client.ApisV1alpha1().ClusterProfiles(cp.Namespace)
	got, err := profiles.Create(ctx, cp, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		old, gerr := profiles.Get(ctx, cp.Name, metav1.GetOptions{})
		if gerr != nil {
			return gerr
		}
		next := cp.DeepCopy()
		next.ResourceVersion = old.ResourceVersion
		got, err = profiles.Update(ctx, next, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("publish ClusterProfile %s/%s: %w", cp.Namespace, cp.Name, err)
	}
	got.Status = cp.Status
	if _, err := profiles.UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("publish ClusterProfile %s/%s status: %w", cp.Namespace, cp.Name, err)
	}
	return nil
}
