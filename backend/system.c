/* ferry_system_probe: what this machine offers — the backend AUTO resolves
 * to, the GPU, and the topology (NUMA nodes, cores) read with hwloc. Lives
 * with the backend because the GPU is the backend's to find. */
#include <hwloc.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/cpu.h"
#include "common/error.h"
#include "common/sized.h"
#include "backend/backend.h"

/* The NUMA node whose PCI subtree holds the GPU with this bus id, or -1. */
static int gpu_numa_node(hwloc_topology_t topo, const char *bus_id)
{
    unsigned domain = 0, bus = 0, dev = 0, func = 0;
    if (sscanf(bus_id, "%x:%x:%x.%x", &domain, &bus, &dev, &func) != 4)
        return -1;
    hwloc_obj_t pci = hwloc_get_pcidev_by_busid(topo, domain, bus, dev, func);
    hwloc_obj_t parent = pci ? hwloc_get_non_io_ancestor_obj(topo, pci) : NULL;
    if (!parent || !parent->nodeset)
        return -1;
    return hwloc_bitmap_first(parent->nodeset);
}

static void probe_topology(ferry_system_info *info, const char *gpu_bus_id)
{
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0)
        return;
    /* PCI discovery only to place a GPU: it is slow, and libpciaccess keeps
     * allocations it never frees. */
    if (gpu_bus_id && *gpu_bus_id)
        hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    if (hwloc_topology_load(topo) == 0) {
        int nodes = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
        info->numa_nodes = nodes > 0 ? nodes : 1;
        info->cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
        info->pus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
        if (gpu_bus_id && *gpu_bus_id)
            info->gpu_numa_node = gpu_numa_node(topo, gpu_bus_id);
    }
    hwloc_topology_destroy(topo);
    /* hwloc counts only memory it attributes to NUMA nodes; the kernel's
     * figure is what the machine really has. */
    info->host_memory_bytes = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
}

ferry_status ferry_system_probe(ferry_system_info *info)
{
    if (!info)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_system_probe: info is NULL");
    ferry_system_info fresh = FERRY_SYSTEM_INFO_INIT, *caller = info;
    ferry_status st = sized_write(caller, &fresh, sizeof fresh, "ferry_system_info");
    if (st != FERRY_OK)
        return st;
    info = &fresh; /* filled whole here, handed over at the end */
#ifdef FERRY_HAVE_CUDA
    info->cuda_compiled = 1;
#endif
    info->gpu_count = backend_cuda_device_count();
    char bus_id[32] = "";
    if (info->gpu_count > 0 &&
        backend_cuda_describe(info->gpu_name, sizeof info->gpu_name, &info->gpu_memory_bytes,
                              bus_id, sizeof bus_id) != FERRY_OK)
        info->gpu_name[0] = '\0';
    probe_topology(info, bus_id);
    snprintf(info->simd, sizeof info->simd, "%s", cpu_simd_name(cpu_simd_detect()));
    info->backend = info->gpu_count > 0 ? FERRY_BACKEND_CUDA : FERRY_BACKEND_HOST;
    return sized_write(caller, &fresh, sizeof fresh, "ferry_system_info");
}
