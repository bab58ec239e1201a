package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"
)

// These tests hold the ConfigMap store's own decisions (which key, what
// is newer, what fits, a conflict re-read) on a fake clientset; the RBAC
// and the round trip on a real API server are test/e2e's
// TestWebhookStateConfigMap.

const stateNS, stateCM = "crucible-system", "crucible-authn-webhook-state"

func configMapStore(t *testing.T, objects ...runtime.Object) (*fake.Clientset, StateStore) {
	t.Helper()
	client := fake.NewClientset(objects...)
	store, err := StateConfigMap(client.CoreV1(), stateNS, stateCM)
	if err != nil {
		t.Fatal(err)
	}
	return client, store
}

func emptyStateConfigMap() *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: stateNS, Name: stateCM}}
}

func stateValue(t *testing.T, client *fake.Clientset) string {
	t.Helper()
	cm, err := client.CoreV1().ConfigMaps(stateNS).Get(t.Context(), stateCM, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm.Data["provider-hub.json"]
}

// TestConfigMapStateAfterRestart: keys fetched by one process verify in
// the next one from the ConfigMap while discovery fails, as from a file.
func TestConfigMapStateAfterRestart(t *testing.T) {
	iss := newTestIssuer(t)
	cfg := stateConfig(t, iss, "2h")
	clock := testingclock.NewFakeClock(time.Now().UTC().Truncate(time.Second))
	client, store := configMapStore(t, emptyStateConfigMap())
	checkStatus(t, startWebhookWith(t, iss, cfg, store, clock).review(t, v1, hubToken(t, hubClaims())), authenticatedHub)
	p, keys, err := decodeState([]byte(stateValue(t, client)))
	if err != nil || p.Provider != "hub" || !p.FetchedAt.Equal(clock.Now()) || len(keys) != 1 {
		t.Fatalf("stored state = %+v, %d keys, %v; want hub's, fetched now", p, len(keys), err)
	}

	iss.set(func(ti *testIssuer) { ti.discoveryOff = true })
	clock.Step(time.Hour)
	second := startWebhookWith(t, iss, cfg, store, clock)
	checkStatus(t, second.review(t, v1, hubToken(t, hubClaims())), authenticatedHub)
	checkSource(t, second, sourcePersisted, time.Hour)
	if logs := second.logs.String(); !strings.Contains(logs, "store=\"configmap "+stateNS+"/"+stateCM+"\"") {
		t.Errorf("the use of persisted keys should name the ConfigMap:\n%s", logs)
	}
}

// TestConfigMapStateUnavailable: without the ConfigMap, or without the
// right to read it, the webhook starts without persisted keys and says
// why once; a ConfigMap without the provider's key is nothing to say.
func TestConfigMapStateUnavailable(t *testing.T) {
	iss := newTestIssuer(t)
	cfg := stateConfig(t, iss, "2h")
	clock := testingclock.NewFakeClock(time.Now())
	iss.set(func(ti *testIssuer) { ti.discoveryOff = true })

	_, missing := configMapStore(t)
	forbiddenClient, forbidden := configMapStore(t, emptyStateConfigMap())
	forbiddenClient.PrependReactor("get", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, stateCM, errors.New("RBAC: denied"))
	})
	_, empty := configMapStore(t, emptyStateConfigMap())
	for _, tt := range []struct {
		name   string
		store  StateStore
		reason string // "" for no line
	}{
		{"missing ConfigMap", missing, "not found"},
		{"forbidden", forbidden, "RBAC: denied"},
		{"no key yet", empty, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := startWebhookWith(t, iss, cfg, tt.store, clock)
			unavailable(t, f.review(t, v1, hubToken(t, hubClaims())))
			n := strings.Count(f.logs.String(), "ignored persisted provider keys")
			if tt.reason == "" && n != 0 || tt.reason != "" && (n != 1 || !strings.Contains(f.logs.String(), tt.reason)) {
				t.Errorf("want %d lines ignoring the state (reason %q):\n%s", min(len(tt.reason), 1), tt.reason, f.logs)
			}
		})
	}
}

// TestConfigMapStateHostile: a value that is not the provider's own,
// well-formed state is ignored with its reason, as a file is.
func TestConfigMapStateHostile(t *testing.T) {
	iss := newTestIssuer(t)
	cfg := stateConfig(t, iss, "2h")
	clock := testingclock.NewFakeClock(time.Now())
	good := goodState(t, iss, cfg, clock)
	var other map[string]any
	if err := json.Unmarshal(good, &other); err != nil {
		t.Fatal(err)
	}
	other["provider"] = "other"
	otherData, _ := json.Marshal(other)
	iss.set(func(ti *testIssuer) { ti.discoveryOff = true })
	for _, tt := range []struct{ name, value, reason string }{
		{"another provider", string(otherData), `written for provider \"other\"`},
		{"truncated", string(good[:len(good)/2]), "unexpected EOF"},
		{"over the size limit", strings.Repeat("a", MaxStateBytes+1), "larger than 1048576 bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cm := emptyStateConfigMap()
			cm.Data = map[string]string{"provider-hub.json": tt.value}
			_, store := configMapStore(t, cm)
			f := startWebhookWith(t, iss, cfg, store, clock)
			unavailable(t, f.review(t, v1, hubToken(t, hubClaims())))
			if logs := f.logs.String(); strings.Count(logs, "ignored persisted provider keys") != 1 || !strings.Contains(logs, tt.reason) {
				t.Errorf("want one line ignoring the value with reason %q:\n%s", tt.reason, logs)
			}
		})
	}
}

// TestConfigMapStateWrite: a write never creates the ConfigMap, keeps a
// later fetch another replica stored, refuses what would not fit, keeps
// other keys, and re-reads on a conflict.
func TestConfigMapStateWrite(t *testing.T) {
	at := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	state := func(fetched time.Time) persisted {
		var p persisted
		if err := json.Unmarshal(fuzzState(t), &p); err != nil {
			t.Fatal(err)
		}
		p.FetchedAt = fetched
		return p
	}
	ctx := context.Background()

	_, missing := configMapStore(t)
	if err := missing.write(ctx, state(at)); err == nil || !strings.Contains(err.Error(), "never creates it") {
		t.Errorf("write without the ConfigMap = %v, want an error saying it is not created", err)
	}

	cm := emptyStateConfigMap()
	cm.Data = map[string]string{"unrelated": "kept"}
	client, store := configMapStore(t, cm)
	conflicts := 0
	client.PrependReactor("update", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts < 2 {
			conflicts++
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, stateCM, errors.New("changed"))
		}
		return false, nil, nil
	})
	if err := store.write(ctx, state(at)); err != nil {
		t.Fatalf("write after two conflicts: %v", err)
	}
	if conflicts != 2 {
		t.Errorf("conflicts answered = %d, want 2", conflicts)
	}
	if err := store.write(ctx, state(at.Add(-time.Minute))); err != nil {
		t.Fatal(err)
	}
	data, err := store.read(ctx, "hub")
	if err != nil {
		t.Fatal(err)
	}
	if p, _, err := decodeState(data); err != nil || !p.FetchedAt.Equal(at) {
		t.Errorf("after an older write the stored fetch is %v (%v), want the later %v kept", p.FetchedAt, err, at)
	}
	if got, _ := client.CoreV1().ConfigMaps(stateNS).Get(ctx, stateCM, metav1.GetOptions{}); got.Data["unrelated"] != "kept" {
		t.Errorf("other keys = %v, want kept", got.Data)
	}

	full := emptyStateConfigMap()
	full.BinaryData = map[string][]byte{"ballast": make([]byte, maxConfigMapStateBytes)}
	_, fullStore := configMapStore(t, full)
	if err := fullStore.write(ctx, state(at)); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("write into a full ConfigMap = %v, want refused with the size", err)
	}
	if _, err := fullStore.read(ctx, "hub"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("read of a key never written = %v, want fs.ErrNotExist", err)
	}
}

// TestStateConfigMapNames: the namespace and name are checked before any
// request.
func TestStateConfigMapNames(t *testing.T) {
	client := fake.NewClientset()
	for _, tt := range []struct{ ns, name string }{
		{"", "x"}, {"Upper", "x"}, {"ns", ""}, {"ns", "a/b"}, {"ns", strings.Repeat("a", 254)}, {"ns/x", "y"},
	} {
		if _, err := StateConfigMap(client.CoreV1(), tt.ns, tt.name); err == nil {
			t.Errorf("StateConfigMap(%q, %q) = nil error, want refused", tt.ns, tt.name)
		}
	}
}
