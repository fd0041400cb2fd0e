// ProcessMesh: the world's ranks as a grid with axes pp, dp, ep, sp, tp (outermost to innermost,
// tp fastest, so a tensor-parallel group sits on neighbouring ranks). Each axis has a
// sub-communicator joining the ranks that differ only along that axis. Under the 2D and 2.5D
// tensor-parallel modes the tp group is itself a depth x q x q grid, with sub-communicators for
// its rows, columns and depth.
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

// How the tensor-parallel group is arranged (--tp-mode): 1d, a q x q grid (2d: tp = q^2), d layers
// of q x q grids (2.5d: tp = d q^2, d = --tp-depth), a q x q x q cube (3d: tp = q^3).
enum class TpMode { d1, d2, d25, d3 };
TpMode parse_tp_mode(const std::string& name);  // throws naming the choices
const char* tp_mode_name(TpMode mode);

// The grid coordinates of a tp rank: rank = (layer * q + row) * q + col (2d: one layer; 2.5d: d
// layers; 3d: q layers, cube = true).
struct TpGrid {
  int q = 1, depth = 1;
  int row = 0, col = 0, layer = 0;
  bool cube = false;
  // The residual stream's token rows are split over the grid's rows and layers (2d, 2.5d) or over
  // its rows and columns (3d): which share of the micro-batch's sequences this rank holds.
  int batch_parts() const { return cube ? q * q : depth * q; }
  int batch_part() const { return cube ? row * q + col : layer * q + row; }
};

// Sizes per axis; dp = 0 means "infer": world / (pp * ep * sp * tp).
struct MeshShape {
  int pp = 1, dp = 0, ep = 1, sp = 1, tp = 1;
  TpMode tp_mode = TpMode::d1;
  int tp_depth = 1;  // 2.5d's d
  // The grid's side q (1 for 1d); throws listing the valid --tp sizes when tp does not fit the mode.
  int tp_side() const;
  int tp_batch_parts() const;    // the tp grid's shares of the batch (TpGrid::batch_parts; 1 under 1d)
  int tp_feature_parts() const;  // the ranks splitting the heads and features: tp (1d), q (grids)
  // The grid coordinates of tp rank `tp_rank` (all zero, q = 1, under 1d).
  TpGrid tp_grid(int tp_rank) const;
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
  // The tp grid (2d, 2.5d, 3d): this rank's coordinates, and the groups of ranks that differ only in
  //   row: the column (ordered by col), col: the row, depth: the layer,
  //   batch: the row and the layer (ordered layer-major), plane: the row and the column (row-major).
  // Under 2d/2.5d a row group shares token rows (it splits the features), batch shares features;
  // under 3d the stream's rows are shared by a depth group, its features by a plane.
  // Under 1d they are groups of one rank.
  enum class GridGroup { row, col, depth, batch, plane };
  // The ranks splitting the residual stream's token rows: batch (2d, 2.5d) or plane (3d).
  Communicator& grid_rows() { return grid_group(grid_.cube ? GridGroup::plane : GridGroup::batch); }
  const TpGrid& tp_grid() const { return grid_; }
  Communicator& grid_group(GridGroup g) { return *grid_groups_[static_cast<int>(g)]; }
  const Communicator& grid_group(GridGroup g) const { return *grid_groups_[static_cast<int>(g)]; }

  // ---- the groups a model and the trainer use, derived here once -------------------------------
  // The ranks splitting each global batch into disjoint rows: dp x ep x the tp grid's rows (sp
  // splits the sequences of those rows, tp the features).
  int64_t batch_ranks() const;
  // Within one dp rank's rows, the ep x grid-rows ranks each hold a share of every micro-batch's
  // sequences: this rank's share and their count.
  int64_t batch_share() const { return static_cast<int64_t>(coord(Axis::ep)) * grid_.batch_parts() + grid_.batch_part(); }
  int64_t batch_shares() const { return static_cast<int64_t>(shape_.ep) * grid_.batch_parts(); }
  // Sums a value of which each rank holds its rows' share (a loss, a count) over every group that
  // splits the batch: the data group (dp x sp), ep, the tp grid's rows, then, with across_stages,
  // pp (where only the last stage holds a nonzero share). Always in this order and one group at a
  // time, so the same layout adds the same way wherever it is summed.
  double sum_batch_shares(double value, bool across_stages);
  // Under a tp grid, the groups that complete its partial gradients (parallel/tensor_grid.h): the
  // stream's rows, a branch's rows (the grid's rows and layers), and the copies of weight blocks
  // (2.5d: the layers; 3d: the token table's copies along the columns). Null under 1d tp.
  struct PartialGradientGroups {
    Communicator *stream_rows = nullptr, *branch_rows = nullptr, *block_copies = nullptr;
    explicit operator bool() const { return stream_rows != nullptr; }
  };
  PartialGradientGroups partial_gradient_groups();

  // Every communicator of the mesh: the axis groups, the grid groups, the data group and the world.
  std::vector<Communicator*> all_groups();
  std::vector<const Communicator*> all_groups() const;

  // The world rank at the given coordinates (pure arithmetic, no communication).
  static int rank_of(const MeshShape& shape, const std::array<int, kAxes>& coords);
  static std::array<int, kAxes> coords_of(const MeshShape& shape, int rank);

 private:
  void make_grid_groups();

  MeshShape shape_;
  int world_rank_ = 0, world_size_ = 1;
  std::array<int, kAxes> coords_{};
  std::array<MPI_Comm, kAxes> comms_{};
  std::array<std::unique_ptr<Communicator>, kAxes> groups_;
  std::unique_ptr<Communicator> world_;
  MPI_Comm data_comm_ = MPI_COMM_NULL;
  std::unique_ptr<Communicator> data_;
  TpGrid grid_;
  std::array<MPI_Comm, 5> grid_comms_{MPI_COMM_NULL, MPI_COMM_NULL, MPI_COMM_NULL, MPI_COMM_NULL, MPI_COMM_NULL};
  std::array<std::unique_ptr<Communicator>, 5> grid_groups_;
};

}  // namespace tessera::comm
