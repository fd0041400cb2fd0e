// ProcessMesh on real MPI ranks: coordinates, group sizes and membership, layouts refused with
// their arithmetic, and the communicator's collectives on each axis group.
// ranks: 1 2 4 8
#include <gtest/gtest.h>

#include "comm/process_mesh.h"

using namespace tessera;
using namespace tessera::comm;

namespace {
int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}
}  // namespace

TEST(MeshShape, InfersDpAndStatesArithmetic) {
  EXPECT_EQ((MeshShape{1, 0, 1, 1, 2}.resolved(8).dp), 4);
  EXPECT_EQ((MeshShape{2, 0, 1, 2, 2}.resolved(8).dp), 1);
  try {
    MeshShape{1, 0, 1, 1, 3}.resolved(8);
    FAIL() << "tp 3 on 8 ranks was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("= 3 does not divide 8"), std::string::npos) << e.what();
  }
  try {
    MeshShape{2, 2, 1, 1, 4}.resolved(8);
    FAIL() << "pp 2 x dp 2 x tp 4 on 8 ranks was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("= 16"), std::string::npos) << e.what();
  }
}

TEST(ProcessMesh, CoordinatesRoundTripWithTpFastest) {
  const MeshShape s = MeshShape{2, 0, 1, 2, 2}.resolved(16);  // dp = 2
  for (int r = 0; r < 16; ++r) EXPECT_EQ(ProcessMesh::rank_of(s, ProcessMesh::coords_of(s, r)), r);
  EXPECT_EQ(ProcessMesh::coords_of(s, 1)[static_cast<int>(Axis::tp)], 1);  // neighbours differ in tp
  EXPECT_EQ(ProcessMesh::coords_of(s, 8)[static_cast<int>(Axis::pp)], 1);  // the outermost axis
}

TEST(ProcessMesh, GroupsJoinRanksDifferingInOneAxis) {
  const int n = world_size();
  const int tp = n >= 2 ? 2 : 1;
  ProcessMesh mesh(MeshShape{1, 0, 1, 1, tp});
  EXPECT_EQ(mesh.group(Axis::tp).size(), tp);
  EXPECT_EQ(mesh.group(Axis::dp).size(), n / tp);
  EXPECT_EQ(mesh.group(Axis::tp).rank(), mesh.coord(Axis::tp));
  EXPECT_EQ(mesh.group(Axis::dp).rank(), mesh.coord(Axis::dp));
  // Sum of world ranks over the tp group: the neighbours (r - r % tp) .. + tp - 1.
  const double sum = mesh.group(Axis::tp).all_reduce_sum(static_cast<double>(mesh.world_rank()));
  const int first = mesh.world_rank() - mesh.world_rank() % tp;
  EXPECT_EQ(sum, tp * first + tp * (tp - 1) / 2);
  // All-reduce of a tensor over dp: every element becomes the sum of the dp coordinates.
  Tensor t = Tensor::empty({5});
  for (int i = 0; i < 5; ++i) t.data<float>()[i] = static_cast<float>(mesh.coord(Axis::dp) + i);
  mesh.group(Axis::dp).all_reduce_sum(t);
  const int dp = n / tp;
  for (int i = 0; i < 5; ++i) EXPECT_EQ(t.data<float>()[i], static_cast<float>(dp * (dp - 1) / 2 + dp * i));
}

// The data group joins the ranks that differ in dp and sp only (same tp), ordered dp-major.
TEST(ProcessMesh, DataGroupJoinsDpAndSp) {
  const int n = world_size();
  const int sp = n >= 4 ? 2 : 1, tp = n >= 8 ? 2 : 1;
  ProcessMesh mesh(MeshShape{1, 0, 1, sp, tp});
  comm::Communicator& data = mesh.data_group();
  EXPECT_EQ(data.size(), n / tp);
  EXPECT_EQ(data.rank(), mesh.coord(Axis::dp) * sp + mesh.coord(Axis::sp));
  EXPECT_EQ(data.name(), sp > 1 ? "dp*sp" : "dp");
  // Every member has this rank's tp coordinate.
  EXPECT_EQ(data.all_reduce_sum(static_cast<double>(mesh.coord(Axis::tp))), mesh.coord(Axis::tp) * data.size());
  EXPECT_EQ(mesh.all_groups().size(), static_cast<size_t>(comm::kAxes + 7));  // + the 5 tp grid groups
}

// --tp-mode 2d and 2.5d: a --tp that is not q^2 (d q^2) is refused listing the valid sizes.
TEST(MeshShape, GridModesNeedSquareGrids) {
  MeshShape s{1, 0, 1, 1, 4};
  s.tp_mode = TpMode::d2;
  EXPECT_EQ(s.tp_side(), 2);
  EXPECT_EQ(s.tp_batch_parts(), 2);
  EXPECT_EQ(s.tp_feature_parts(), 2);
  s.tp = 8;
  try {
    s.tp_side();
    FAIL() << "tp 8 accepted for 2d";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("one of 1, 4, 9, 16"), std::string::npos) << e.what();
  }
  s.tp_mode = TpMode::d25;
  s.tp_depth = 2;
  EXPECT_EQ(s.tp_side(), 2);
  EXPECT_EQ(s.tp_batch_parts(), 4);
  s.tp_mode = TpMode::d1;
  EXPECT_THROW(s.tp_side(), Error);  // --tp-depth needs 2.5d
}

// The grid's groups: a 2 x 2 grid on 4 ranks, 2 layers of it on 8, a 1 x 1 grid (every group one
// rank) on fewer. Rows join the ranks of one grid row (same token rows), columns those of one grid
// column, depth the layers, batch the rows and layers of one column.
TEST(ProcessMesh, GridGroupsJoinTheGridsRowsColumnsAndLayers) {
  const int n = world_size();
  MeshShape shape{1, 1, 1, 1, n >= 4 ? n : 1};
  shape.dp = n / shape.tp;
  shape.tp_mode = n == 8 ? TpMode::d25 : TpMode::d2;
  shape.tp_depth = n == 8 ? 2 : 1;
  ProcessMesh mesh(shape);
  const TpGrid& g = mesh.tp_grid();
  const int q = n >= 4 ? 2 : 1, depth = n == 8 ? 2 : 1;
  EXPECT_EQ(g.q, q);
  EXPECT_EQ(g.depth, depth);
  EXPECT_EQ(mesh.coord(Axis::tp), (g.layer * q + g.row) * q + g.col);
  using G = ProcessMesh::GridGroup;
  EXPECT_EQ(mesh.grid_group(G::row).size(), q);
  EXPECT_EQ(mesh.grid_group(G::row).rank(), g.col);
  EXPECT_EQ(mesh.grid_group(G::col).size(), q);
  EXPECT_EQ(mesh.grid_group(G::col).rank(), g.row);
  EXPECT_EQ(mesh.grid_group(G::depth).size(), depth);
  EXPECT_EQ(mesh.grid_group(G::batch).size(), q * depth);
  EXPECT_EQ(mesh.grid_group(G::batch).rank(), g.batch_part());
  // A row shares (layer, row); a column (layer, col); the batch group col.
  const int row_id = g.layer * q + g.row, col_id = g.layer * q + g.col;
  EXPECT_EQ(mesh.grid_group(G::row).all_reduce_sum(static_cast<double>(row_id)), q * row_id);
  EXPECT_EQ(mesh.grid_group(G::col).all_reduce_sum(static_cast<double>(col_id)), q * col_id);
  EXPECT_EQ(mesh.grid_group(G::batch).all_reduce_sum(static_cast<double>(g.col)), g.col * q * depth);
}
