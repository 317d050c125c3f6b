// Placeholder so sluice_train has a source until the trainer lands; delete it then.
namespace sluice {}
