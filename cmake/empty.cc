// Placeholder translation unit for a layer library with no sources yet.
struct Empty {};
