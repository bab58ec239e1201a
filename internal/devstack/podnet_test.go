package devstack

import (
	"os"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// TestPodLinkHasNoIPv6Address: a pod link's host end comes up without the
// IPv6 link-local address the kernel gives a link by default, so starting
// or ending a pod changes no address on the host (chromium fails its
// requests in flight on any address change).
func TestPodLinkHasNoIPv6Address(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("creating links needs root")
	}
	attrs := netlink.NewLinkAttrs()
	attrs.Name = "crvtest0"
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: attrs, PeerName: "crptest0"}); err != nil {
		t.Skipf("cannot create a veth here: %v", err)
	}
	t.Cleanup(func() {
		if link, err := netlink.LinkByName("crvtest0"); err == nil {
			_ = netlink.LinkDel(link)
		}
	})
	host, err := netlink.LinkByName("crvtest0")
	if err != nil {
		t.Fatal(err)
	}
	peer, err := netlink.LinkByName("crptest0")
	if err != nil {
		t.Fatal(err)
	}
	if err := upWithoutIPv6(host); err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(peer); err != nil { // the host end is now up and running, as a pod's is
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the kernel adds a link-local address as the link comes up
	addrs, err := netlink.AddrList(host, netlink.FAMILY_V6)
	if err != nil {
		t.Fatal(err)
	}
	if len(addrs) > 0 {
		t.Errorf("the pod link's host end has IPv6 addresses %v, want none", addrs)
	}
	peerAddrs, err := netlink.AddrList(peer, netlink.FAMILY_V6)
	if err != nil {
		t.Fatal(err)
	}
	if len(peerAddrs) == 0 {
		t.Log("the peer (default mode) got no IPv6 address either: this kernel may not add link-local addresses")
	}
}
