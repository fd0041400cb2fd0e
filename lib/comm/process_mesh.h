// ProcessMesh: the world's ranks as a grid with axes pp, dp, ep, sp, tp (outermost to innermost,
// tp fastest, so a tensor-parallel group sits on neighbouring ranks). Each axis has a
// sub-communicator joining the ranks that differ only along that axis.
#pragma once
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace tessera::comm {

enum class Axis : int { pp = 0, dp = 1, ep = 2, sp = 3, tp = 4 };
constexpr int kAxes = 5;
const char* axis_name(Axis axis);

// Sizes per axis; dp = 0 means "infer": world / (pp * ep * sp * tp).
struct MeshShape {
  int pp = 1, dp = 0, ep = 1, sp = 1, tp = 1;
  // Fills in dp and checks that the product is the world size; throws an Error that states the
  // arithmetic otherwise. Runs before any communication.
  MeshShape resolved(int world_size) const;
  int size(Axis a) const;
  std::string str() const;  // "pp=1 dp=4 ep=1 sp=1 tp=2"
};

class ProcessMesh {
 public:
  ProcessMesh(const MeshShape& shape, MPI_Comm world = MPI_COMM_WORLD);  // collective over world
  ~ProcessMesh();
  ProcessMesh(const ProcessMesh&) = delete;
  ProcessMesh& operator=(const ProcessMesh&) = delete;

  const MeshShape& shape() const { return shape_; }
  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  int coord(Axis a) const { return coords_[static_cast<int>(a)]; }
  Communicator& group(Axis a) { return *groups_[static_cast<int>(a)]; }
  const Communicator& group(Axis a) const { return *groups_[static_cast<int>(a)]; }
  Communicator& world() { return *world_; }
  const Communicator& world() const { return *world_; }
  // dp x sp: the ranks holding the same parameters (same tp, pp and ep coordinates) that see
  // different tokens: replicated parameters' gradients are reduced, and ZeRO shards, over it.
  Communicator& data_group() { return *data_; }
  const Communicator& data_group() const { return *data_; }
  // Every communicator of the mesh: the axis groups, the data group and the world.
  std::vector<Communicator*> all_groups();
  std::vector<const Communicator*> all_groups() const;

  // The world rank at the given coordinates (pure arithmetic, no communication).
  static int rank_of(const MeshShape& shape, const std::array<int, kAxes>& coords);
  static std::array<int, kAxes> coords_of(const MeshShape& shape, int rank);

 private:
  MeshShape shape_;
  int world_rank_ = 0, world_size_ = 1;
  std::array<int, kAxes> coords_{};
  std::array<MPI_Comm, kAxes> comms_{};
  std::array<std::unique_ptr<Communicator>, kAxes> groups_;
  std::unique_ptr<Communicator> world_;
  MPI_Comm data_comm_ = MPI_COMM_NULL;
  std::unique_ptr<Communicator> data_;
};

}  // namespace tessera::comm
