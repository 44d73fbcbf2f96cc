// Command deviceplugin is the local node's stand-in for a GPU node's device plugins: it serves the kubelet's device
// plugin API (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1, the release the kubelet is built from) for each resource
// of tools/node/resources.env, so that the kubelet itself admits, counts and allocates the pods' GPU and fabric
// requests, and each container gets what the real plugin would hand it:
//
//   - nvidia.com/gpu (NVIDIA k8s-device-plugin, deviceListStrategy "envvar", the chart's default): NVIDIA_VISIBLE_DEVICES
//     lists the allocated GPUs' ids, and the driver's nvidia-smi is mounted into the container (on a GPU node the
//     NVIDIA container runtime mounts it from the driver); here it is tools/node/nvidia-smi, which lists those GPUs.
//   - vpc.amazonaws.com/efa (AWS EFA device plugin): one /dev/infiniband/uverbs<N> per allocated EFA interface.
//   - rdma/ib (Mellanox k8s-rdma-shared-dev-plugin, a shared resource): every selected HCA's /dev/infiniband/uverbs<N>
//     and /dev/infiniband/rdma_cm, whatever the count requested.
//
// The devices are stand-ins: each is the host's /dev/null under the device's name (the recipes check that the
// devices exist and build UCX_NET_DEVICES from their names; nothing here talks to them).
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// rdmaHCAs: the HCAs the RDMA shared plugin's selector matches on the stand-in node (an 8-GPU InfiniBand node has
// one ConnectX per GPU).
const rdmaHCAs = 8

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	resource string
	count    int
	nvsmi    string
}

func (p *plugin) ids() []string {
	out := make([]string, p.count)
	for i := range out {
		if p.resource == "nvidia.com/gpu" {
			out[i] = fmt.Sprintf("GPU-00000000-0000-4000-8000-%012d", i)
		} else {
			out[i] = fmt.Sprintf("%s-%d", strings.ReplaceAll(p.resource, "/", "-"), i)
		}
	}
	return out
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	var devs []*pluginapi.Device
	for _, id := range p.ids() {
		devs = append(devs, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
	}
	if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
		return err
	}
	<-s.Context().Done()
	return nil
}

func device(name string) *pluginapi.DeviceSpec {
	return &pluginapi.DeviceSpec{ContainerPath: "/dev/infiniband/" + name, HostPath: "/dev/null", Permissions: "rw"}
}

func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		r := &pluginapi.ContainerAllocateResponse{}
		switch p.resource {
		case "nvidia.com/gpu":
			r.Envs = map[string]string{"NVIDIA_VISIBLE_DEVICES": strings.Join(c.DevicesIDs, ",")}
			r.Mounts = []*pluginapi.Mount{{ContainerPath: "/usr/bin/nvidia-smi", HostPath: p.nvsmi, ReadOnly: true}}
		case "vpc.amazonaws.com/efa":
			for _, id := range c.DevicesIDs {
				r.Devices = append(r.Devices, device("uverbs"+id[strings.LastIndex(id, "-")+1:]))
			}
		default: // rdma/ib: shared, every HCA
			for i := 0; i < rdmaHCAs; i++ {
				r.Devices = append(r.Devices, device(fmt.Sprintf("uverbs%d", i)))
			}
			r.Devices = append(r.Devices, device("rdma_cm"))
		}
		log.Printf("%s: allocated %d device(s) %v", p.resource, len(c.DevicesIDs), c.DevicesIDs)
		resp.ContainerResponses = append(resp.ContainerResponses, r)
	}
	return resp, nil
}

func (p *plugin) serve(dir string) (string, error) {
	sock := strings.ReplaceAll(p.resource, "/", "_") + ".sock"
	path := filepath.Join(dir, sock)
	_ = os.Remove(path)
	lis, err := net.Listen("unix", path)
	if err != nil {
		return "", err
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	go func() { _ = srv.Serve(lis) }()
	return sock, nil
}

func register(dir, sock, resource string) error {
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "kubelet.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: sock, ResourceName: resource, Options: &pluginapi.DevicePluginOptions{},
	})
	return err
}

func readResources(file string) (map[string]int, []string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	counts := map[string]int{}
	var order []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		n, err := strconv.Atoi(v)
		if !ok || err != nil || n <= 0 {
			return nil, nil, fmt.Errorf("%s: %q is not resource=count", file, line)
		}
		counts[k] = n
		order = append(order, k)
	}
	return counts, order, sc.Err()
}

func main() {
	dir := flag.String("dir", "", "the kubelet's device-plugins directory (<root-dir>/device-plugins)")
	resources := flag.String("resources", "", "resource=count lines (tools/node/resources.env)")
	nvsmi := flag.String("nvidia-smi", "", "the nvidia-smi stand-in mounted into containers that get a GPU")
	flag.Parse()
	counts, order, err := readResources(*resources)
	if err != nil {
		log.Fatal(err)
	}
	kubelet := filepath.Join(*dir, "kubelet.sock")
	var seen os.FileInfo
	for {
		// (Re-)register whenever the kubelet's socket is new: a restarted kubelet forgets its plugins.
		st, err := os.Stat(kubelet)
		if err == nil && (seen == nil || !os.SameFile(seen, st)) {
			ok := true
			for _, r := range order {
				p := &plugin{resource: r, count: counts[r], nvsmi: *nvsmi}
				sock, err := p.serve(*dir)
				if err == nil {
					err = register(*dir, sock, r)
				}
				if err != nil {
					log.Printf("%s: %v (retrying)", r, err)
					ok = false
					break
				}
				log.Printf("%s: registered %d device(s) with the kubelet", r, p.count)
			}
			if ok {
				seen = st
			}
		}
		time.Sleep(time.Second)
	}
}
