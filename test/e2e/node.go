/*
Copyright 2026 The csi-lib fork authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The node: containerd (with runc and Debian's CNI plugins), kubelet and
// kube-controller-manager, started as child processes of this program against the envtest
// control plane. Everything it creates lives under its run directory, except what the tools
// insist on (containerd's shim sockets under /run/containerd, the network namespaces under
// /var/run/netns, the bridge) and the cgroups under its own cgroup root; all of it is removed
// by stop, which also stops every process by the PID it recorded and restores the sysctls
// kubelet changes.

const (
	// cgroupRootName is the kubelet's cgroup root: created before kubelet starts and removed,
	// with everything below it, after the node has stopped.
	cgroupRootName = "csi-lib-e2e"
	// bridgeName is the CNI bridge, created by the bridge plugin and removed by stop.
	bridgeName = "csilibe2e0"
	// podSubnet is the pods' address range. No traffic is ever sent to it.
	podSubnet = "10.250.0.0/24"
	// nodeName is the node's name: kubelet refuses a loopback node IP, so the apiserver reaches
	// it by this host name.
	nodeName = "localhost"
	// sandboxImage holds the pause binary; the test containers use it too.
	imageName = "csi-lib.local/e2e:v1"
)

// kubeletSysctls are the sysctls kubelet sets (it does unless protectKernelDefaults); stop puts
// back the values they had before the node started.
var kubeletSysctls = []string{"vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops"}

// toolDirs are directories outside the run directory that the tools create: the network
// namespaces' mount points, containerd's shim sockets and runc's state, and CNI's cache. Those
// that did not exist before the node started are removed after it stopped (by then every
// sandbox, and so every network namespace, is gone).
var toolDirs = []string{"/var/run/netns", "/run/containerd", "/var/lib/cni"}

// kubeletPorts are kubelet's ports: a node already running on this machine holds them.
var kubeletPorts = []int{10250, 10248}

type node struct {
	dir     string // the run directory
	bins    string // kubelet, kube-controller-manager
	procs   []*process
	sysctls map[string]string
	cgroups []string // the cgroup root in every v1 hierarchy (created) and the unified one (kubelet's)
	// createdDirs are the toolDirs that did not exist before the node started.
	createdDirs []string
	log         func(format string, args ...any)
}

// process is a child process started by the node, stopped by its PID.
type process struct {
	name string
	path string
	args []string
	cmd  *exec.Cmd
	done chan struct{}
}

// containerdSocket is the CRI and containerd API socket.
func (n *node) containerdSocket() string {
	return filepath.Join(n.dir, "containerd", "containerd.sock")
}

// kubeletDir is kubelet's root directory (pods, plugins, plugins_registry).
func (n *node) kubeletDir() string { return filepath.Join(n.dir, "kubelet") }

// checkMachine says why this machine cannot run the node, or nil.
func checkMachine(bins string) error {
	if os.Geteuid() != 0 {
		return errors.New("the real node needs root (kubelet mounts volumes and runs containers)")
	}
	for _, tool := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "ip", "ldd"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is not installed (test/e2e/install-node-packages.sh installs containerd, runc and the CNI plugins from Debian)", tool)
		}
	}
	for _, plugin := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(cniBinDir, plugin)); err != nil {
			return fmt.Errorf("CNI plugin %s is missing from %s (Debian's containernetworking-plugins)", plugin, cniBinDir)
		}
	}
	for _, b := range []string{"kubelet", "kube-controller-manager", "kube-scheduler"} {
		if _, err := os.Stat(filepath.Join(bins, b)); err != nil {
			return fmt.Errorf("%s is not built in %s (NODE=1 hack/envtest-binaries.sh builds it)", b, bins)
		}
	}
	for _, port := range kubeletPorts {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			return fmt.Errorf("port %d is taken: another kubelet runs on this machine (one node per machine at a time)", port)
		}
		_ = l.Close()
	}
	for _, h := range append(cgroupHierarchies(), cgroup2Hierarchies()...) {
		if _, err := os.Stat(filepath.Join(h, cgroupRootName)); err == nil {
			return fmt.Errorf("cgroup %s already exists: another node runs, or a run was killed before removing it", filepath.Join(h, cgroupRootName))
		}
	}
	return nil
}

// cniBinDir is where Debian's containernetworking-plugins installs the plugins.
const cniBinDir = "/usr/lib/cni"

// cgroupHierarchies are the mounted cgroup v1 hierarchies (one directory each).
func cgroupHierarchies() []string { return cgroupMounts("cgroup") }

// cgroup2Hierarchies are the mounted cgroup v2 hierarchies: on a hybrid machine kubelet also
// creates its cgroup root in the unified one.
func cgroup2Hierarchies() []string { return cgroupMounts("cgroup2") }

// cgroupMounts are the mount points of the filesystems of type fstype.
func cgroupMounts(fstype string) []string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		sep := slices.Index(fields, "-")
		if sep < 0 || sep+1 >= len(fields) || fields[sep+1] != fstype {
			continue
		}
		out = append(out, fields[4])
	}
	return out
}

// start brings the node up: sysctls saved, cgroup root created, containerd started and the
// image imported, kubelet and kube-controller-manager started. On error what was started is
// stopped again.
func (n *node) start(ctx context.Context, kubeconfig []byte, imageArchive string) (err error) {
	defer func() {
		if err != nil {
			n.stop()
		}
	}()
	n.saveSysctls()
	if err := n.createCgroupRoot(); err != nil {
		return err
	}
	for _, d := range toolDirs {
		if _, err := os.Stat(d); errors.Is(err, os.ErrNotExist) {
			n.createdDirs = append(n.createdDirs, d)
		}
	}
	for _, d := range []string{"containerd", "cni/net.d", "cni/state", "kubelet", "pod-logs"} {
		if err := os.MkdirAll(filepath.Join(n.dir, d), 0o700); err != nil {
			return err
		}
	}
	// A Bidirectional mount (the deployment story's DaemonSet driver) needs its hostPath on a
	// shared mount, and this machine's / may be private: the run directory becomes a shared
	// mount of its own (unmounted with everything under it when the node stops).
	if err := syscall.Mount(n.dir, n.dir, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mounting the run directory on itself: %w", err)
	}
	if err := syscall.Mount("", n.dir, "", syscall.MS_SHARED|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("making the run directory a shared mount: %w", err)
	}
	kubeconfigPath := filepath.Join(n.dir, "kubeconfig")
	if err := os.WriteFile(kubeconfigPath, kubeconfig, 0o600); err != nil {
		return err
	}
	if err := n.writeFile("cni/net.d/10-csi-lib-e2e.conflist", cniConfig(filepath.Join(n.dir, "cni/state"))); err != nil {
		return err
	}
	if err := n.writeFile("containerd/config.toml", containerdConfig(n.dir)); err != nil {
		return err
	}
	if err := n.startProcess("containerd", "containerd", "--config", filepath.Join(n.dir, "containerd/config.toml")); err != nil {
		return err
	}
	if err := n.waitFor(ctx, "containerd's socket", 30*time.Second, func() bool {
		return exec.CommandContext(ctx, "ctr", "--address", n.containerdSocket(), "version").Run() == nil
	}); err != nil {
		return err
	}
	if err := n.importImage(ctx, imageArchive); err != nil {
		return err
	}
	if err := n.writeFile("kubelet-config.yaml", kubeletConfig(n)); err != nil {
		return err
	}
	if err := n.startProcess("kubelet", filepath.Join(n.bins, "kubelet"),
		"--config", filepath.Join(n.dir, "kubelet-config.yaml"),
		"--kubeconfig", kubeconfigPath,
		"--hostname-override", nodeName,
		"--root-dir", n.kubeletDir(),
		"--cert-dir", filepath.Join(n.dir, "kubelet-pki"),
		"--v", "2"); err != nil {
		return err
	}
	// The scheduler places the pods of the deployment story's DaemonSet and Deployments (every
	// other story names the node in its pods); the node lifecycle controller removes the
	// not-ready taint kubelet registers the node with, as in a cluster.
	if err := n.startProcess("kube-scheduler", filepath.Join(n.bins, "kube-scheduler"),
		"--kubeconfig", kubeconfigPath,
		"--leader-elect=false",
		"--bind-address", "127.0.0.1",
		"--secure-port", "0",
		"--v", "1"); err != nil {
		return err
	}
	return n.startProcess("kube-controller-manager", filepath.Join(n.bins, "kube-controller-manager"),
		"--kubeconfig", kubeconfigPath,
		"--controllers", "garbagecollector,serviceaccount,daemonset,deployment,replicaset,root-ca-cert-publisher,nodelifecycle",
		"--leader-elect=false",
		"--bind-address", "127.0.0.1",
		"--secure-port", "0",
		"--v", "1")
}

// importImage imports an OCI image archive into the node's containerd (the CRI's namespace).
func (n *node) importImage(ctx context.Context, archive string) error {
	if out, err := exec.CommandContext(ctx, "ctr", "--address", n.containerdSocket(), "-n", "k8s.io", "images", "import", archive).CombinedOutput(); err != nil {
		return fmt.Errorf("importing the image %s: %v: %s", filepath.Base(archive), err, out)
	}
	return nil
}

func (n *node) writeFile(name, content string) error {
	return os.WriteFile(filepath.Join(n.dir, name), []byte(content), 0o600)
}

// startProcess starts a child process, its output in <dir>/<name>.log, and records its PID in
// <dir>/<name>.pid.
func (n *node) startProcess(name, path string, args ...string) error {
	logFile, err := os.OpenFile(filepath.Join(n.dir, name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group, so that a terminal's signals reach only this program, which then
	// stops the node in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, path: path, args: args, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		_ = logFile.Close()
		close(p.done)
	}()
	n.procs = append(n.procs, p)
	n.log("started %s (pid %d)", name, cmd.Process.Pid)
	return os.WriteFile(filepath.Join(n.dir, name+".pid"), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o600)
}

// stopProcess stops one child by its PID: SIGTERM, then SIGKILL after 15 s.
func (n *node) stopProcess(p *process) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		n.log("%s (pid %d) did not stop on SIGTERM; killing it", p.name, p.cmd.Process.Pid)
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// restartProcess stops the named child and starts it again with the same command line.
func (n *node) restartProcess(name string) error {
	p := n.processNamed(name)
	if p == nil {
		return fmt.Errorf("%s is not running", name)
	}
	n.stopProcess(p)
	return n.startProcess(name, p.path, p.args...)
}

// processNamed returns the running child of that name, or nil.
func (n *node) processNamed(name string) *process {
	for _, p := range n.procs {
		if p.name == name {
			select {
			case <-p.done:
			default:
				return p
			}
		}
	}
	return nil
}

// waitFor polls cond every 100 ms until it holds or timeout passes.
func (n *node) waitFor(ctx context.Context, what string, timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s", timeout, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// stop tears the node down in order: kube-controller-manager and kubelet, then every container
// left (through containerd), containerd, the mounts under the run directory, the cgroup root,
// the bridge and the CNI state, and the sysctls. It is safe to call on a node that did not
// fully start.
func (n *node) stop() {
	for _, p := range n.procs {
		if !slices.Contains([]string{"kube-controller-manager", "kubelet", "containerd"}, p.name) {
			n.stopProcess(p)
		}
	}
	for _, name := range []string{"kube-controller-manager", "kubelet"} {
		if p := n.processNamed(name); p != nil {
			n.stopProcess(p)
		}
	}
	if n.processNamed("containerd") != nil {
		n.removeSandboxes()
		n.stopProcess(n.processNamed("containerd"))
	}
	n.unmountUnder(n.dir)
	n.removeCgroupRoot()
	if out, err := exec.Command("ip", "link", "delete", bridgeName).CombinedOutput(); err != nil && !strings.Contains(string(out), "Cannot find device") {
		n.log("removing the bridge %s: %v: %s", bridgeName, err, out)
	}
	for _, d := range n.createdDirs {
		if err := os.RemoveAll(d); err != nil {
			n.log("removing %s: %v", d, err)
		}
	}
	n.restoreSysctls()
}

// removeSandboxes stops and removes, through the CRI, every pod sandbox left in containerd (kubelet
// is stopped by then), so that their containers and shims exit and the CNI plugins release
// their addresses and network namespaces.
func (n *node) removeSandboxes() {
	conn, err := grpc.NewClient("unix://"+n.containerdSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		n.log("connecting to the CRI: %v", err)
		return
	}
	defer conn.Close()
	cri := runtimeapi.NewRuntimeServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := cri.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		n.log("listing pod sandboxes: %v", err)
		return
	}
	for _, sb := range list.Items {
		if _, err := cri.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			n.log("stopping pod sandbox %s: %v", sb.Id, err)
		}
		if _, err := cri.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			n.log("removing pod sandbox %s: %v", sb.Id, err)
		}
	}
	if len(list.Items) > 0 {
		n.log("removed %d pod sandboxes", len(list.Items))
	}
}

// unmountUnder unmounts every mount point below dir, deepest first.
func (n *node) unmountUnder(dir string) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			points = append(points, fields[4])
		}
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil {
			n.log("unmounting %s: %v", p, err)
		}
	}
}

func (n *node) saveSysctls() {
	n.sysctls = map[string]string{}
	for _, key := range kubeletSysctls {
		if v, err := os.ReadFile(filepath.Join("/proc/sys", key)); err == nil {
			n.sysctls[key] = strings.TrimSpace(string(v))
		}
	}
}

func (n *node) restoreSysctls() {
	for key, v := range n.sysctls {
		path := filepath.Join("/proc/sys", key)
		if now, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(now)) == v {
			continue
		}
		if err := os.WriteFile(path, []byte(v+"\n"), 0o644); err != nil {
			n.log("restoring sysctl %s to %s: %v", key, v, err)
		} else {
			n.log("restored sysctl %s to %s", key, v)
		}
	}
}

// createCgroupRoot creates the kubelet's cgroup root in every v1 hierarchy (cpuset needs its
// cpus and mems copied from the parent before anything can join it).
func (n *node) createCgroupRoot() error {
	for _, h := range cgroupHierarchies() {
		dir := filepath.Join(h, cgroupRootName)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return fmt.Errorf("creating cgroup %s: %w", dir, err)
		}
		n.cgroups = append(n.cgroups, dir)
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if v, err := os.ReadFile(filepath.Join(h, f)); err == nil {
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return fmt.Errorf("setting %s of %s: %w", f, dir, err)
				}
			}
		}
	}
	if len(n.cgroups) == 0 {
		return errors.New("no cgroup v1 hierarchy is mounted")
	}
	// Kubelet creates the same root in a unified hierarchy; the check before the start saw none
	// there, so what the removal finds is this node's.
	for _, h := range cgroup2Hierarchies() {
		n.cgroups = append(n.cgroups, filepath.Join(h, cgroupRootName))
	}
	return nil
}

// removeCgroupRoot removes the cgroup root and every cgroup below it, deepest first. Only
// cgroups this node created (its own root and what kubelet and runc made under it) are touched.
func (n *node) removeCgroupRoot() {
	for _, root := range n.cgroups {
		var dirs []string
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		slices.SortFunc(dirs, func(a, b string) int { return len(b) - len(a) })
		for _, d := range dirs {
			var err error
			for i := 0; i < 50; i++ { // a cgroup whose last process just exited may be busy briefly
				if err = syscall.Rmdir(d); err == nil || errors.Is(err, os.ErrNotExist) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				n.log("removing cgroup %s: %v", d, err)
			}
		}
	}
	n.cgroups = nil
}

func cniConfig(stateDir string) string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "csi-lib-e2e",
  "plugins": [{
    "type": "bridge",
    "bridge": %q,
    "isGateway": false,
    "ipMasq": false,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "dataDir": %q}
  }]
}
`, bridgeName, podSubnet, stateDir)
}

func containerdConfig(dir string) string {
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = %[3]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[4]q
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[5]q
    conf_dir = %[6]q
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
`, filepath.Join(dir, "containerd/root"), filepath.Join(dir, "containerd/state"), filepath.Join(dir, "containerd/containerd.sock"),
		imageName, cniBinDir, filepath.Join(dir, "cni/net.d"))
}

func kubeletConfig(n *node) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
containerRuntimeEndpoint: unix://%[1]s
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
cgroupDriver: cgroupfs
cgroupRoot: /%[2]s
cgroupsPerQOS: true
failCgroupV1: false
failSwapOn: false
protectKernelDefaults: false
podLogsDir: %[3]q
resolvConf: ""
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%%"
  imagefs.available: "1%%"
  nodefs.inodesFree: "1%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
syncFrequency: 10s
fileCheckFrequency: 10s
`, n.containerdSocket(), cgroupRootName, filepath.Join(n.dir, "pod-logs"))
}
