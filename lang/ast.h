/* ast: the syntax tree of one program (the main file and its imports).
 *
 * Built by the parser (lang/grammar.y through the ast_* constructors in
 * ast.c), read by the checker (compiler/sema.c). Every node lives in the
 * compilation's Arena and carries the Span of the source it came from.
 * Numbers are kept as written: value plus unit; the checker folds units and
 * reports overflow (the parser only records that a literal did not fit).
 */
#ifndef ZINF_AST_H
#define ZINF_AST_H
#include <stdbool.h>
#include <stdint.h>
#include "arena.h"
#include "diag.h"
#include "vocab.h" /* DType, InitKind: the plan's codes */

/* Unit suffixes on number literals. Counts are decimal (K = 1e3 ... T = 1e12),
 * bytes decimal (KB..TB) or binary (KiB..TiB), rates are bytes per second. */
typedef enum UnitKind { UNIT_NONE, UNIT_COUNT, UNIT_BYTES, UNIT_RATE } UnitKind;

typedef struct Unit {
    UnitKind kind;
    uint64_t scale; /* multiplier: 1000, 1ull<<30, ... (1 for UNIT_NONE) */
} Unit;


typedef enum ExprKind {
    EX_INT,    /* ival (overflow set if the literal did not fit in 63 bits), unit */
    EX_FLOAT,  /* fval, unit */
    EX_STR,    /* str, slen: escapes decoded */
    EX_NAME,   /* name */
    EX_UNARY,  /* op ('-'), lhs */
    EX_BINARY, /* op ('+' '-' '*' '/' '%'), lhs, rhs */
    EX_CALL,   /* name (callee), args */
    EX_LIST,   /* items (as args with no names) */
    EX_PARAM,  /* param [dims] dtype? init init_name(args) */
} ExprKind;

typedef struct Expr Expr;
typedef struct Arg {
    const char *name; /* NULL for positional */
    Span name_span;
    Expr *value;
} Arg;

typedef struct ArgList {
    Arg *items;
    int len, cap;
} ArgList;

typedef struct ExprList {
    Expr **items;
    int len, cap;
} ExprList;


struct Expr {
    ExprKind kind;
    Span span;
    int op;            /* EX_UNARY, EX_BINARY: the operator character */
    Expr *lhs, *rhs;
    int64_t ival;
    bool overflow;     /* EX_INT: literal too large */
    double fval;
    Unit unit;         /* EX_INT, EX_FLOAT */
    const char *str;   /* EX_STR (decoded), EX_NAME and EX_CALL (identifier) */
    size_t slen;
    Span name_span;    /* EX_CALL: the callee name */
    ArgList args;      /* EX_CALL arguments; EX_LIST items; EX_PARAM init arguments */
    /* EX_PARAM */
    ExprList dims;
    DType dtype;       /* DT_NONE: the training dtype */
    InitKind init;
    Span init_span;
    bool frozen;       /* `param [..] init zeros frozen`: not trained */
};

/* A type in a signature: i32[B, T], [B, T, D] (any dtype), or none at all (a
 * constant argument such as a head count). */
typedef struct TypeExpr {
    bool present;
    DType dtype;       /* DT_NONE: any */
    ExprList dims;     /* names unbound in the layer's scope are shape variables */
    Span span;
} TypeExpr;

typedef struct ParamDecl {
    const char *name;
    Span span;
    TypeExpr type;
    Expr *default_value; /* optional: layer attention(x, heads, kv_heads = heads) */
} ParamDecl;

typedef struct ParamList {
    ParamDecl *items;
    int len, cap;
} ParamList;

typedef enum StmtKind {
    ST_ASSIGN, /* targets = value; several targets destructure a tuple */
    ST_REPEAT, /* repeat count [as index] { body } */
    ST_RETURN, /* return values (one or more) */
    ST_LOSS,   /* loss value */
    ST_IF,     /* if cond { body } [else { else_body }] */
} StmtKind;

typedef struct Stmt Stmt;
typedef struct StmtList {
    Stmt **items;
    int len, cap;
} StmtList;

typedef struct NameList {
    const char **items;
    Span *spans;
    int len, cap;
} NameList;

struct Stmt {
    StmtKind kind;
    Span span;
    NameList targets;     /* ST_ASSIGN */
    Expr *value;          /* ST_ASSIGN, ST_LOSS */
    ExprList values;      /* ST_RETURN */
    Expr *count;          /* ST_REPEAT; ST_IF: the condition */
    const char *index;    /* ST_REPEAT: NULL when no "as i" */
    Span index_span;
    StmtList body;        /* ST_REPEAT, ST_IF */
    Span open_brace;      /* ST_REPEAT, ST_IF: where the body's brace opened */
    bool has_else;        /* ST_IF */
    StmtList else_body;   /* ST_IF */
};

/* key = value, key "selector" = value, or key { settings } inside train,
 * target and plan blocks. */
typedef struct Setting Setting;
typedef struct SettingList {
    Setting **items;
    int len, cap;
} SettingList;

struct Setting {
    const char *key;
    Span span;           /* the key */
    const char *selector; /* optional string after the key, e.g. tiles "block.*.mlp" = 4 */
    Span selector_span;
    Expr *value;         /* NULL when this is a block */
    SettingList block;
    bool is_block;
    bool quoted;         /* the key was a string: an hf block's parameter pattern */
};

typedef enum DeclKind {
    DL_IMPORT, /* import "name" */
    DL_CONST,  /* const a = 1, b = 2 (one Decl per name) */
    DL_LAYER,
    DL_MODEL,
    DL_TRAIN,
    DL_TARGET,
    DL_PLAN,
    DL_HF,     /* hf ["Architecture"] { "pattern" = expr; config = expr } */
} DeclKind;

typedef struct Decl {
    DeclKind kind;
    Span span;           /* the whole declaration head */
    const char *name;    /* const, layer, model, target; import: the string; hf: the architecture or NULL */
    Span name_span;
    Expr *value;         /* const */
    ParamList params;    /* layer, model */
    StmtList body;       /* layer, model */
    SettingList settings; /* train, target, plan, hf */
    int file;            /* source file index it was declared in */
    int import_file;     /* import: the source file index of the file it names (set by the loader, the one
                          * place imports are resolved), -1 when it names none */
} Decl;

typedef struct DeclList {
    Decl **items;
    int len, cap;
} DeclList;

/* One parsed file. Imports are resolved by the driver (lang/loader.c), which
 * parses each imported file once and records them in order. */
typedef struct AstFile {
    int file;            /* SourceSet index */
    DeclList decls;
} AstFile;

typedef struct Program {
    AstFile **files;     /* files[0] is the main file; imports follow, each once */
    int nfiles, cap;
} Program;

/* Constructors used by the parser; all allocate in the arena. */
Expr *ast_expr(Arena *a, ExprKind k, Span sp);
Stmt *ast_stmt(Arena *a, StmtKind k, Span sp);
Decl *ast_decl(Arena *a, DeclKind k, Span sp);
Setting *ast_setting(Arena *a, const char *key, Span sp);
void ast_args_push(Arena *a, ArgList *l, Arg arg);
void ast_exprs_push(Arena *a, ExprList *l, Expr *e);
void ast_stmts_push(Arena *a, StmtList *l, Stmt *s);
void ast_params_push(Arena *a, ParamList *l, ParamDecl p);
void ast_names_push(Arena *a, NameList *l, const char *name, Span sp);
void ast_settings_push(Arena *a, SettingList *l, Setting *s);
void ast_decls_push(Arena *a, DeclList *l, Decl *d);

/* Prints the tree in a stable, indented form (for tests and --emit=ast). */
void ast_dump(const AstFile *f, FILE *out);

#endif
