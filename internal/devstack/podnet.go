package devstack

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"net"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"
)

// Pod networks. Where the runtime may (root, network namespaces allowed),
// each pod gets a network namespace of its own, as a pod on a kubelet does:
// its own loopback, so that two pods may both listen on 7777, and a veth
// whose host end routes the pod's address. The host side of every pod link
// is one gateway address on a link of its own, PodGatewayLink, shared by
// every stack on the machine (as docker0 is by containers): the controller's
// external listener binds it, so pods reach the drop-box and nothing else
// on the host's loopback. The link is a bridge without ports (a dummy link
// would do, but not every kernel has the module: Firecracker's does not);
// pods are routed, not bridged, each by a /32 route to its veth. It is
// created on first use and left for the next stack; each pod's veth goes
// with the pod's namespace.

const (
	// PodGatewayLink holds PodGateway on the host: `ip link del crucible0`
	// removes it once no stack runs.
	PodGatewayLink = "crucible0"
	// podSubnetBits: pods get addresses in 10.213.0.0/16.
	podSubnetBits = 16
)

// PodGateway is the host address pods reach the host at: the controller's
// external listener, its ingest_url and its certificate's SANs name it
// when pods have networks of their own.
var PodGateway = net.IPv4(10, 213, 0, 1).To4()

// errNoPodNetwork explains, once per `dev up`, what differs when pods
// cannot get a network namespace: run-live cannot reach a pod's own port.
var errNoPodNetwork = errors.New("pods share the host's network (no network namespace of their own), " +
	"so two pods cannot listen on the same port and run-live (port-forward) is unavailable")

// ensurePodGateway makes the link holding PodGateway exist, up. Other
// stacks may be doing the same at once, so "exists" is success.
func ensurePodGateway() error {
	link, err := netlink.LinkByName(PodGatewayLink)
	if err != nil {
		var notFound netlink.LinkNotFoundError
		if !errors.As(err, &notFound) {
			return fmt.Errorf("look up %s: %w", PodGatewayLink, err)
		}
		attrs := netlink.NewLinkAttrs()
		attrs.Name = PodGatewayLink
		if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: attrs}); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("create %s: %w", PodGatewayLink, err)
		}
		if link, err = netlink.LinkByName(PodGatewayLink); err != nil {
			return fmt.Errorf("look up %s: %w", PodGatewayLink, err)
		}
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: PodGateway, Mask: net.CIDRMask(32, 32)}}
	if err := netlink.AddrAdd(link, addr); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("add %s to %s: %w", PodGateway, PodGatewayLink, err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("set %s up: %w", PodGatewayLink, err)
	}
	return nil
}

// podNet is a pod's link: the host end's name and the pod's address.
type podNet struct {
	hostLink string
	ip       net.IP
}

// linkNames are the host end of a pod's veth and its peer's name until it
// is renamed eth0 in the pod: from the pod's uid, so that they are the same
// pod's on every attempt, and at most 15 bytes (IFNAMSIZ).
func linkNames(uid types.UID) (host, peer string) {
	h := fnv.New32a()
	_, _ = h.Write([]byte(uid))
	sum := fmt.Sprintf("%08x", h.Sum32())
	return "crv" + sum, "crp" + sum
}

// setupPodNet gives the network namespace of process pid (a pod helper
// started with CLONE_NEWNET, waiting for this) its loopback and a veth to
// the host with an address of its own and a default route to PodGateway.
func setupPodNet(pid int, uid types.UID) (*podNet, error) {
	hostName, peerName := linkNames(uid)
	attrs := netlink.NewLinkAttrs()
	attrs.Name = hostName
	veth := &netlink.Veth{LinkAttrs: attrs, PeerName: peerName, PeerNamespace: netlink.NsPid(pid)}
	if err := netlink.LinkAdd(veth); err != nil {
		return nil, fmt.Errorf("create veth %s: %w", hostName, err)
	}
	pn := &podNet{hostLink: hostName}
	ok := false
	defer func() {
		if !ok {
			pn.remove()
		}
	}()
	host, err := netlink.LinkByName(hostName)
	if err != nil {
		return nil, err
	}
	if err := upWithoutIPv6(host); err != nil {
		return nil, err
	}
	if pn.ip, err = routePodAddress(host); err != nil {
		return nil, err
	}
	if err := configurePodSide(pid, peerName, pn.ip); err != nil {
		return nil, err
	}
	ok = true
	return pn, nil
}

// in6AddrGenModeNone is linux/if_link.h's IN6_ADDR_GEN_MODE_NONE.
const in6AddrGenModeNone = 1

// upWithoutIPv6 sets a pod link's host end up without the IPv6 link-local
// address the kernel would give it. Pods are routed by IPv4 alone, and every
// address that comes and goes on the host tells the programs watching the
// host's addresses that the network changed: chromium then fails its
// requests in flight, even to 127.0.0.1, with net::ERR_NETWORK_CHANGED,
// which is how a UI test's page lost its modules whenever another stack
// on the machine started or ended a pod (ci52, ci54).
func upWithoutIPv6(link netlink.Link) error {
	name := link.Attrs().Name
	if err := netlink.LinkSetIP6AddrGenMode(link, in6AddrGenModeNone); err != nil {
		return fmt.Errorf("turn off IPv6 addresses on %s: %w", name, err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("set %s up: %w", name, err)
	}
	return nil
}

// routePodAddress picks the pod's address and routes it to host. The host
// route is the allocation: adding one another stack's pod holds fails with
// EEXIST, so two stacks never hand out one address.
func routePodAddress(host netlink.Link) (net.IP, error) {
	for range 64 {
		var b [4]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		n := binary.BigEndian.Uint32(b[:]) & (1<<(32-podSubnetBits) - 1)
		if n < 256 || n == 1<<(32-podSubnetBits)-1 { // 10.213.0.x is the gateway's; the last is broadcast
			continue
		}
		ip := net.IPv4(10, 213, byte(n>>8), byte(n)).To4()
		route := &netlink.Route{LinkIndex: host.Attrs().Index, Dst: &net.IPNet{IP: ip, Mask: net.CIDRMask(32, 32)}, Scope: netlink.SCOPE_LINK}
		err := netlink.RouteAdd(route)
		if err == nil {
			return ip, nil
		}
		if !errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("route %s to %s: %w", ip, host.Attrs().Name, err)
		}
	}
	return nil, errors.New("no free pod address in 10.213.0.0/16 after 64 tries")
}

// configurePodSide, in the pod's namespace: lo up, the peer renamed eth0
// with ip/32, a link route to the gateway and the default route through it.
func configurePodSide(pid int, peerName string, ip net.IP) error {
	ns, err := netns.GetFromPid(pid)
	if err != nil {
		return fmt.Errorf("open the pod's network namespace: %w", err)
	}
	defer func() { _ = ns.Close() }()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netlink in the pod's namespace: %w", err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return err
	}
	if err := h.LinkSetUp(lo); err != nil {
		return fmt.Errorf("set the pod's lo up: %w", err)
	}
	eth, err := h.LinkByName(peerName)
	if err != nil {
		return err
	}
	if err := h.LinkSetName(eth, "eth0"); err != nil {
		return fmt.Errorf("rename %s to eth0: %w", peerName, err)
	}
	if err := h.AddrAdd(eth, &netlink.Addr{IPNet: &net.IPNet{IP: ip, Mask: net.CIDRMask(32, 32)}}); err != nil {
		return fmt.Errorf("address %s on the pod's eth0: %w", ip, err)
	}
	if err := h.LinkSetUp(eth); err != nil {
		return fmt.Errorf("set the pod's eth0 up: %w", err)
	}
	gw := &net.IPNet{IP: PodGateway, Mask: net.CIDRMask(32, 32)}
	if err := h.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Dst: gw, Scope: netlink.SCOPE_LINK}); err != nil {
		return fmt.Errorf("route to the gateway in the pod: %w", err)
	}
	if err := h.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Gw: PodGateway}); err != nil {
		return fmt.Errorf("default route in the pod: %w", err)
	}
	return nil
}

// remove deletes the host end of the pod's veth (its peer and the route go
// with it). The pod's namespace going away does the same; this is for a
// pod whose processes outlive the runtime's interest, and for tidiness.
func (pn *podNet) remove() {
	if pn == nil {
		return
	}
	if link, err := netlink.LinkByName(pn.hostLink); err == nil {
		_ = netlink.LinkDel(link)
	}
}

// probePodNetwork reports whether pods can have network namespaces here:
// the gateway link can be made and a helper can start in a namespace.
func probePodNetwork() error {
	if err := ensurePodGateway(); err != nil {
		return err
	}
	return probeNamespaces(unix.CLONE_NEWNS | unix.CLONE_NEWNET)
}
