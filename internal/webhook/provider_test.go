package webhook

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	authv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/user"
)

func TestRefuse(t *testing.T) {
	p := &provider{allowed: sets.New(controllerSub)}
	tests := []struct {
		name string
		sub  string
		user user.Info
		want string
	}{
		{"allowed", controllerSub, &user.DefaultInfo{Name: "hub:" + controllerSub, Groups: []string{"hub:controllers"}}, ""},
		{"subject not allowed", "system:serviceaccount:crucible:default", &user.DefaultInfo{Name: "hub:x"}, "subject not in allowedSubjects"},
		{"empty subject", "", &user.DefaultInfo{Name: "hub:x"}, "subject not in allowedSubjects"},
		{"system username", controllerSub, &user.DefaultInfo{Name: controllerSub}, "mapped username starts with system:"},
		{"system group", controllerSub, &user.DefaultInfo{Name: "hub:x", Groups: []string{"hub:a", "system:masters"}}, "a mapped group starts with system:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := p.refuse(tt.sub, tt.user); got != tt.want {
				t.Errorf("refuse = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestRefuseEmptyAllowlist(t *testing.T) {
	p := &provider{allowed: sets.New[string]()}
	if got := p.refuse(controllerSub, &user.DefaultInfo{Name: "hub:x"}); got == "" {
		t.Errorf("an empty allowlist accepted %s", controllerSub)
	}
}

func TestUserInfoDropsReservedExtra(t *testing.T) {
	got := userInfo(&user.DefaultInfo{
		Name:   "hub:x",
		UID:    "u",
		Groups: []string{"g"},
		Extra: map[string][]string{
			"authentication.kubernetes.io/credential-id": {"JTI=1"},
			"authentication.kubernetes.io/pod-name":      {"p"},
			"crucible.dev/hub-namespace":                 {"crucible"},
		},
	})
	want := authv1.UserInfo{
		Username: "hub:x",
		UID:      "u",
		Groups:   []string{"g"},
		Extra:    map[string]authv1.ExtraValue{"crucible.dev/hub-namespace": {"crucible"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("userInfo (-want +got):\n%s", diff)
	}
}
